-- A bounce or complaint suppresses the mailbox the address reaches, not
-- only its spelling (notify/feedback): a complaint from `v@` stops
-- `v+x@` too, and on Gmail every dotted form, as the recipient limits
-- already count (EmailAddress::mailbox; this expression is the same rule,
-- for the rows stored before).
ALTER TABLE suppressed_addresses ADD COLUMN mailbox text;
UPDATE suppressed_addresses s
   SET mailbox = CASE WHEN a.domain IN ('gmail.com', 'googlemail.com')
                      THEN replace(a.base, '.', '') || '@gmail.com'
                      ELSE a.base || '@' || a.domain END
  FROM (SELECT email,
               CASE WHEN split_part(local, '+', 1) = '' THEN local ELSE split_part(local, '+', 1) END AS base,
               domain
          FROM (SELECT email,
                       substring(email FROM '^(.*)@[^@]*$') AS local,
                       substring(email FROM '@([^@]*)$') AS domain
                  FROM suppressed_addresses) parts) a
 WHERE s.email = a.email;
ALTER TABLE suppressed_addresses ALTER COLUMN mailbox SET NOT NULL;
CREATE INDEX suppressed_addresses_mailbox ON suppressed_addresses (mailbox);
