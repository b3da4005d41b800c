//! The end-to-end suite, one test binary: each module was a file of its own
//! under `tests/tests/` (one binary each, linked 25 times). Run one module
//! with `./scripts/test.sh --test suite -- send_rate::`.

mod abuse_limits;
mod attendee_zones;
mod bad_input;
mod booking_api;
mod booking_lifecycle;
mod booking_lifecycle_soak;
mod booking_updates;
mod console;
mod contracts;
mod custom_resource;
mod database_config;
mod deadline;
mod held_snapshot;
mod identity;
mod layers;
mod leases;
mod least_privilege;
mod listing;
mod mail_card;
mod migrations;
mod notification_status;
mod observability;
mod old_news;
mod openapi;
mod operator;
mod organizer_domains;
mod outbox_poller;
mod outbox_scenarios;
mod outboxctl;
mod recovery;
mod release_build;
mod reminders;
mod send_rate;
mod ses_feedback;
mod ses_feedback_end_to_end;
mod ses_identity;
mod ses_mailer;
mod settings;
mod smtp_mailer;
mod trace_across_the_outbox;
mod unknown_reconciliation;
mod vacuum_horizon;
