-- Limits that protect the person they count, and cannot be spent against
-- them (notify/recipient_limit.rs; docs/security.md, "Limits"). V16 kept
-- one daily budget per mailbox, shared by every organizer: anyone could
-- spend it at 00:00 and have every other organizer's invitations, updates
-- and cancellations to that person dropped for the day. Now:
--
-- - Only an invitation is counted (the first mail of a booking that can
--   reach a person). An update or cancellation of an invitation they may
--   have received is never counted and never capped.
-- - Each organizer has their own budget per mailbox and UTC day
--   (LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY): what one organizer spends
--   never reduces what another may send.
-- - Across organizers, only first contacts are bounded: organizers who
--   never mailed the mailbox before may start at most
--   LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY contacts with it a day. An
--   organizer the person already has a booking with is never counted
--   there, so throwaway accounts can fill it only at the expense of other
--   newcomers.
--
-- Organizers and recipients are both keyed by the mailbox their address
-- reaches (`v+1@` is `v@`; Gmail's dots do not count): one person's
-- many spellings are one organizer, and one recipient.
CREATE TABLE mailbox_organizers (
    mailbox    text    NOT NULL,
    organizer  text    NOT NULL,
    -- The UTC day of the organizer's first counted invitation to the mailbox.
    since      date    NOT NULL,
    -- Invitations counted on `day` (the last day any was).
    day        date    NOT NULL,
    mails      integer NOT NULL CHECK (mails >= 0),
    PRIMARY KEY (mailbox, organizer)
);
-- Retention forgets contacts unused for a long time.
CREATE INDEX mailbox_organizers_day ON mailbox_organizers (day);

-- How many organizers first mailed each mailbox per UTC day, the refused
-- included: the row lock of its upsert orders concurrent pollers, so no
-- more first contacts than LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY pass.
CREATE TABLE mailbox_newcomers (
    day         date    NOT NULL,
    mailbox     text    NOT NULL,
    organizers  integer NOT NULL CHECK (organizers >= 0),
    -- By day first: retention deletes past days through it.
    PRIMARY KEY (day, mailbox)
);
GRANT SELECT, INSERT, UPDATE (organizers) ON mailbox_newcomers TO outbox_poller;
GRANT SELECT, DELETE ON mailbox_newcomers TO outbox_sweeper;
GRANT SELECT, INSERT, UPDATE, DELETE ON mailbox_newcomers TO booking_app;

GRANT SELECT, INSERT, UPDATE ON mailbox_organizers TO outbox_poller;
GRANT SELECT, DELETE ON mailbox_organizers TO outbox_sweeper;
GRANT SELECT, INSERT, UPDATE, DELETE ON mailbox_organizers TO booking_app;

-- The shared budget is gone; a day's counts are worth nothing once the
-- rule that read them changed.
DROP TABLE recipient_daily_mails;
