"""The Send and Delivery events SES publishes to EventBridge for a message
it accepted, built from the one shape (ses-event.json, beside this file)
that the Rust tests fill in too. Used by ses-publisher.py (SES v2's API in
front of moto) and smtp-server.py (SES's SMTP interface).
Python 3.9+, standard library only."""
import json
import uuid
from copy import deepcopy
from datetime import timedelta
from pathlib import Path

SHAPE = json.loads((Path(__file__).resolve().parent / "ses-event.json").read_text())


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def send_and_delivery(*, source, destination, tags, config_set, message_id, now, account, region):
    """[Send, Delivery] for a message from `source` to `destination` (bare
    addresses), tagged `tags` ({name: [value]}), sent through `config_set`
    (None: none) and accepted at `now` as `message_id`."""
    mail = {**deepcopy(SHAPE["mail"]), "timestamp": rfc3339(now), "source": source,
            "sourceArn": f"arn:aws:ses:{region}:{account}:identity/{source}", "sendingAccountId": account,
            "messageId": message_id, "destination": list(destination), "tags": tags}
    resources = [f"arn:aws:ses:{region}:{account}:configuration-set/{config_set}"] if config_set else []
    delivered = now + timedelta(milliseconds=7)
    delivery = {**deepcopy(SHAPE["delivery"]), "timestamp": rfc3339(delivered), "processingTimeMillis": 7,
                "recipients": list(destination)}

    def envelope(event_type, at, section):
        detail = {"eventType": event_type, "mail": mail, SHAPE["sections"][event_type]: section}
        return {**deepcopy(SHAPE["envelope"]), "id": str(uuid.uuid4()), "detail-type": SHAPE["detail_types"][event_type],
                "account": account, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "region": region,
                "resources": resources, "detail": detail}

    return [envelope("Send", now, {}), envelope("Delivery", delivered, delivery)]
