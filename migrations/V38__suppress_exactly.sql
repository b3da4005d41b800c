-- A bounce suppresses the address that bounced, exactly; only a complaint,
-- which only the person can make, suppresses their mailbox: every spelling
-- of it (notify/feedback). And an address's mailbox folds sub-addresses
-- only at the providers that document them (shared/data/subaddressing.json),
-- never at every domain. Before, an invitation to `victim+x@` at a domain
-- that refuses sub-addresses bounced and suppressed `victim@`: every
-- organizer's invitations and cancellations to that person failed.
ALTER TABLE suppressed_addresses
    ADD COLUMN covers text NOT NULL DEFAULT 'address' CHECK (covers IN ('address', 'mailbox'));
UPDATE suppressed_addresses SET covers = 'mailbox' WHERE reason = 'complained';
-- The rows stored before were folded at every domain (V27): each address
-- at a domain the list does not name (as it stands at this migration) is
-- its own mailbox again.
UPDATE suppressed_addresses
   SET mailbox = email
 WHERE substring(email FROM '@([^@]*)$') NOT IN
       ('gmail.com', 'googlemail.com', 'outlook.com', 'hotmail.com', 'live.com', 'icloud.com', 'me.com',
        'mac.com', 'proton.me', 'protonmail.com', 'pm.me', 'fastmail.com', 'fastmail.fm');
-- A mailbox is looked up only for what covers it.
DROP INDEX suppressed_addresses_mailbox;
CREATE INDEX suppressed_addresses_mailbox ON suppressed_addresses (mailbox) WHERE covers = 'mailbox';
-- A complaint about an address that had bounced widens its row to the
-- mailbox (and nothing else of it).
GRANT UPDATE (covers, mailbox, reason, send_id) ON suppressed_addresses TO ses_events;
