"""The events SES publishes to EventBridge for a message it accepted
(Send, then Delivery, or the mailbox simulator's Bounce or Complaint), built from the one shape (ses-event.json, beside this file)
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


SIMULATOR = "simulator.amazonses.com"


def outcome(address):
    """What SES's mailbox simulator does with `address`
    (docs.aws.amazon.com/ses/latest/dg/send-an-email-from-console.html#send-email-simulator):
    `bounce@` a hard bounce, `suppressionlist@` a bounce as if on the
    suppression list, `complaint@` a delivery then a complaint; any other
    address (and `success@`, `ooto@`) a delivery, as a real mailbox's."""
    local, _, domain = address.lower().partition("@")
    if domain != SIMULATOR:
        return "delivered"
    return {"bounce": "bounced", "suppressionlist": "suppressed", "complaint": "complained"}.get(local.split("+")[0], "delivered")


def send_and_delivery(*, source, destination, tags, config_set, message_id, now, account, region):
    """The events SES publishes for a message from `source` to `destination`
    (bare addresses), tagged `tags` ({name: [value]}), sent through
    `config_set` (None: none) and accepted at `now` as `message_id`: Send,
    then what each recipient's mailbox did ([`outcome`]): Delivery, Bounce,
    or Delivery then Complaint."""
    mail = {**deepcopy(SHAPE["mail"]), "timestamp": rfc3339(now), "source": source,
            "sourceArn": f"arn:aws:ses:{region}:{account}:identity/{source}", "sendingAccountId": account,
            "messageId": message_id, "destination": list(destination), "tags": tags}
    resources = [f"arn:aws:ses:{region}:{account}:configuration-set/{config_set}"] if config_set else []
    later = lambda ms: now + timedelta(milliseconds=ms)  # noqa: E731

    def envelope(event_type, at, section):
        detail = {"eventType": event_type, "mail": mail, SHAPE["sections"][event_type]: section}
        return {**deepcopy(SHAPE["envelope"]), "id": str(uuid.uuid4()), "detail-type": SHAPE["detail_types"][event_type],
                "account": account, "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "region": region,
                "resources": resources, "detail": detail}

    events = [envelope("Send", now, {})]
    fates = {address: outcome(address) for address in destination}
    delivered = [a for a, fate in fates.items() if fate in ("delivered", "complained")]
    if delivered:
        events.append(envelope("Delivery", later(7), {**deepcopy(SHAPE["delivery"]), "timestamp": rfc3339(later(7)),
                                                      "processingTimeMillis": 7, "recipients": delivered}))
    bounced = [a for a, fate in fates.items() if fate in ("bounced", "suppressed")]
    if bounced:
        recipients = [{**deepcopy(SHAPE["bounced_recipient"]), "emailAddress": a} for a in bounced]
        sub = "Suppressed" if all(fates[a] == "suppressed" for a in bounced) else "General"
        events.append(envelope("Bounce", later(9), {**deepcopy(SHAPE["bounce"]), "bounceType": "Permanent",
                                                    "bounceSubType": sub, "bouncedRecipients": recipients,
                                                    "timestamp": rfc3339(later(9)), "feedbackId": f"{message_id}-bounce"}))
    complained = [a for a, fate in fates.items() if fate == "complained"]
    if complained:
        events.append(envelope("Complaint", later(11), {
            **deepcopy(SHAPE["complaint"]), "complainedRecipients": [{"emailAddress": a} for a in complained],
            "timestamp": rfc3339(later(11)), "arrivalDate": rfc3339(later(10)), "feedbackId": f"{message_id}-complaint",
            "complaintFeedbackType": "abuse"}))
    return events
