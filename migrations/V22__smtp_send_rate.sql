-- The SMTP mailer's fleet bucket (MAILER=smtp with SMTP_MAX_SEND_RATE): a
-- send_rate row under the provider 'smtp', refilled from its own sequence,
-- as SES's is from send_rate_ses_next (V15). The poller's roles may take
-- from it.
CREATE SEQUENCE send_rate_smtp_next AS bigint MINVALUE 0 START 0;
GRANT SELECT, UPDATE ON SEQUENCE send_rate_smtp_next TO booking_app, outbox_poller;
