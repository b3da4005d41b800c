-- Retention of SES's feedback (notify/feedback: purge): a row goes once its
-- send is gone and it is older than the retention age. The sweeper runs it.
GRANT SELECT, DELETE ON send_feedback TO outbox_sweeper;
