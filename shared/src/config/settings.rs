//! Every setting the service reads from its environment, declared once:
//! its name, its default, which programs read it, and one line of doc.
//!
//! The readers call the declared setting ([`Setting::parsed`] and friends),
//! never a name or a default of their own, so a default exists in one place.
//! `docs/configuration.md`'s table and the template's environment blocks are
//! checked against [`ALL`] by a test (`tests/tests/suite/settings.rs`).

/// A program that reads settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reader {
    Api,
    Poller,
    Sweeper,
    SesEvents,
    Migrate,
    /// The operator CLI.
    Outboxctl,
    /// The operator console function.
    Console,
}

impl Reader {
    /// The five Lambda functions.
    pub const FUNCTIONS: [Reader; 5] =
        [Reader::Api, Reader::Poller, Reader::Sweeper, Reader::SesEvents, Reader::Migrate];

    /// As the docs' table names it.
    pub fn doc_name(self) -> &'static str {
        match self {
            Reader::Api => "API",
            Reader::Poller => "poller",
            Reader::Sweeper => "sweeper",
            Reader::SesEvents => "ses-events",
            Reader::Migrate => "migrate",
            Reader::Outboxctl => "outboxctl",
            Reader::Console => "console",
        }
    }
}

/// One setting read from the environment.
#[derive(Debug)]
pub struct Setting {
    pub name: &'static str,
    /// The value used when it is unset, as text (what the docs show); None:
    /// no default (required, or off when unset, as its doc says).
    pub default: Option<&'static str>,
    pub read_by: &'static [Reader],
    /// One line: what it does.
    pub doc: &'static str,
}

/// Every program that connects to the database.
const DATABASE_USERS: &[Reader] = &[
    Reader::Api,
    Reader::Poller,
    Reader::Sweeper,
    Reader::SesEvents,
    Reader::Migrate,
    Reader::Outboxctl,
    Reader::Console,
];
const FUNCTIONS: &[Reader] = &Reader::FUNCTIONS;
use Reader::{Api, Console, Outboxctl, Poller, Sweeper};

// The sweeper's settings are outboxctl's and the console's too: they sweep,
// report and resend with the same configuration (`SweeperConfig::from_env`).

macro_rules! settings {
    ($( #[doc = $doc:literal] $name:ident = $default:expr, $readers:expr; )+) => {
        $(
            #[doc = $doc]
            pub const $name: Setting = Setting { name: stringify!($name), default: $default, read_by: $readers, doc: $doc.trim_ascii() };
        )+
        /// Every declared setting, in the docs' order.
        pub const ALL: &[&Setting] = &[$(&$name),+];
    };
}

settings! {
    /// `postgres://user:password@host:5432/db`; takes precedence over the secret
    DATABASE_URL = None, DATABASE_USERS;
    /// Secrets Manager secret (RDS format: host, port, username, password, dbname)
    DATABASE_SECRET_ARN = None, DATABASE_USERS;
    /// replaces the secret's host (the RDS Proxy endpoint)
    DATABASE_HOST = None, DATABASE_USERS;
    /// `auto` (TLS required unless the host is loopback), `require`, `disable` (loopback only)
    DATABASE_TLS = Some("auto"), DATABASE_USERS;
    /// extra trusted CA certificates (PEM); the RDS CAs are built in
    DATABASE_CA_FILE = None, DATABASE_USERS;
    /// connections per container; the poller's default and minimum is `2 * POLLER_BATCHES_IN_FLIGHT + 2`, the migration's default 1
    DATABASE_POOL_SIZE = Some("4"), DATABASE_USERS;
    /// seconds to wait for a new database connection
    DATABASE_CONNECT_TIMEOUT_SECS = Some("5"), DATABASE_USERS;
    /// `jwt`; `insecure-dev-headers` exists only in `dev` builds (local development)
    AUTH_MODE = Some("jwt"), &[Api, Console];
    /// the user pool group whose members may use the operator console
    CONSOLE_OPERATORS_GROUP = Some("operators"), &[Console];
    /// where the console's page signs operators in: Cognito's endpoint of the user pool's region (`https://cognito-idp.<region>.amazonaws.com/`); with `CONSOLE_CLIENT_ID`
    CONSOLE_SIGN_IN_ENDPOINT = None, &[Console];
    /// the user pool's app client the page signs in with (the API's, whose ID tokens its authorizer accepts); with `CONSOLE_SIGN_IN_ENDPOINT`
    CONSOLE_CLIENT_ID = None, &[Console];
    /// reminders of a booking that names none: ISO 8601 offsets before the start, comma-separated (`PT24H,PT15M`); unset: none
    DEFAULT_REMINDERS = None, &[Api];
    /// the language of an attendee who names none and whose organizer names none (a BCP 47 tag of a shipped language: `en`, `fr`, `de`, `es`, `ja`); a tag we do not ship also falls back to it
    DEFAULT_LOCALE = Some("en"), &[Api];
    /// divides every reminder's offset, so one arrives within minutes; read only by `dev` builds (`make dev`)
    DEV_REMINDER_SCALE = Some("1"), &[Api];
    /// bookings one organizer may create per UTC day
    LIMIT_BOOKINGS_PER_DAY = Some("50"), &[Api];
    /// emails one organizer's creates, updates and cancels may cause per day (an update mails every attendee and anyone removed; each reminder it schedules, every attendee; each reminder already scheduled, every attendee it adds), each reminder counted on the UTC day it is sent
    LIMIT_RECIPIENTS_PER_DAY = Some("500"), &[Api];
    /// updates plus cancels of one booking per day
    LIMIT_CHANGES_PER_BOOKING_PER_DAY = Some("10"), &[Api];
    /// emails all accounts less than 7 days old (from their first booking) may cause together per day, counted as LIMIT_RECIPIENTS_PER_DAY counts one account's: however many accounts are made, they mail no more than this
    LIMIT_NEW_ACCOUNTS_RECIPIENTS_PER_DAY = Some("1000"), &[Api];
    /// invitations one organizer may send one mailbox per UTC day, however either address is spelled where its provider documents sub-addresses (`v+1@gmail.com`, Gmail's dots; `shared/data/subaddressing.json`); over it an invitation is recorded CAPPED, not sent and not retried; updates and cancellations of a meeting the person may know of are never capped
    LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY = Some("10"), &[Poller];
    /// organizers who never mailed a mailbox before that may start to per UTC day, in each of two pools: organizers with standing (an invitation of theirs first reached someone 7 days ago or more) and the rest; a first invitation over it is recorded CAPPED; organizers the person already heard from never count
    LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY = Some("10"), &[Poller];
    /// how many days in the past a booking may start
    BOOKING_MAX_PAST_DAYS = Some("1"), &[Api];
    /// how many days ahead a booking may start
    BOOKING_MAX_FUTURE_DAYS = Some("1830"), &[Api];
    /// larger request bodies get 413 (at least 1024)
    API_MAX_BODY_BYTES = Some("65536"), &[Api];
    /// https URL under which problem types are documented: a problem's `type` is it followed by the type's name; unset: the API's own `/problems/` (which serves each type's page)
    API_PROBLEM_TYPE_BASE = None, &[Api];
    /// comma-separated domains whose addresses may organize (create and change bookings; any caller may still cancel theirs and list); unset or empty: any verified address. The template sets it to SelfSignUpDomains, which also opens the user pool's sign-up
    ORGANIZER_DOMAINS = None, &[Api];
    /// events claimed at once; a paced poller claims no more than a second of the fleet's rate
    POLLER_BATCH_SIZE = Some("256"), &[Poller];
    /// the most sends claimed in one committed statement; each is claimed only once it may start (a place in flight and its time in the fleet's rate), so a crash leaves at most the sends in flight UNKNOWN
    POLLER_CLAIM_GROUP = Some("256"), &[Poller];
    /// the most sends one poller has in flight; it keeps the fleet's rate × (p95 SES latency + 50 ms) of them (plus a quarter) in flight, up to this
    POLLER_CONCURRENCY = Some("512"), &[Poller];
    /// the share of the fleet's rate (the account's `MaxSendRate`, or the cap) the pollers keep, each send at its own time 1/rate apart, so the network's jitter never puts more than the rate in one second at the provider; above 0, at most 1
    SEND_RATE_HEADROOM = Some("0.97"), &[Poller];
    /// batches one poller processes at once; each holds 2 connections, and the run's lease one (`DATABASE_POOL_SIZE >= 2 * POLLER_BATCHES_IN_FLIGHT + 2`)
    POLLER_BATCHES_IN_FLIGHT = Some("4"), &[Poller];
    /// wake on a booking's commit (`LISTEN` on a dedicated connection); the template turns it off behind RDS Proxy
    POLLER_LISTEN = Some("true"), &[Poller];
    /// wait between empty polls: the fallback for a lost notification or an expired backoff (the latency bound without `LISTEN`)
    POLLER_IDLE_WAIT_MS = Some("200"), &[Poller];
    /// how long a run's lease on its events lasts unrenewed (renewed every quarter of it, never past the run's deadline): a poller that dies, freezes or loses the database has its events taken over by the next claim this long after its last renewal, at most; 2 to 300
    POLLER_LEASE_SECS = Some("4"), &[Poller];
    /// stop claiming when less than this remains before the deadline
    POLLER_SAFETY_MARGIN_SECS = Some("10"), &[Poller];
    /// record notifications a later event of the booking made moot as SUPERSEDED instead of sending them
    POLLER_SKIP_SUPERSEDED = Some("true"), &[Poller];
    /// optional cap on one invocation's polling, also the run time when the runtime reports no usable deadline (`make dev` sets 15); 0 or unset: none
    POLLER_MAX_RUN_SECS = None, &[Poller];
    /// the poller's Lambda timeout: the sweeper and outboxctl judge stuck rows by it; the poller's cold start (only when it is set) refuses SES timeouts that, with the safety margin, do not fit in it
    POLLER_TIMEOUT_SECS = Some("160"), &[Poller, Sweeper, Outboxctl, Console];
    /// the period of the poller's schedule; when set, the cold start warns if one run's polling would not outlast it (a gap with no poller)
    POLLER_SCHEDULE_SECS = None, &[Poller];
    /// attempts of an event before it is dead-lettered
    OUTBOX_MAX_ATTEMPTS = Some("8"), &[Poller, Sweeper, Outboxctl, Console];
    /// the first retry's delay (exponential backoff with jitter)
    OUTBOX_BACKOFF_BASE_SECS = Some("2"), &[Poller];
    /// the longest retry delay
    OUTBOX_BACKOFF_CAP_SECS = Some("900"), &[Poller];
    /// how long an event waits once sending stopped (the provider paused the account, or refused the stack's configuration) before a run tries again; no attempt used
    OUTBOX_PAUSE_DELAY_SECS = Some("300"), &[Poller];
    /// the verified sender, `Name <address>`
    SES_FROM_ADDRESS = None, &[Poller];
    /// SES's region; unset: the function's `AWS_REGION`
    SES_REGION = None, &[Poller];
    /// moto or LocalStack Pro; unset for SES
    SES_ENDPOINT_URL = None, &[Poller];
    /// the configuration set every send names (SES's event destination); ses-events reads only events SES tagged with it (`ses:configuration-set`) and refuses any other (the template passes the same set to both)
    SES_CONFIGURATION_SET = None, &[Poller, Reader::SesEvents];
    /// where a canary goes (through the configuration set) when ambiguous sends wait for SES's events and traffic alone does not bring any: at most one a minute; empty: no canary
    SES_CANARY_ADDRESS = Some("success@simulator.amazonses.com"), &[Poller];
    /// at most one canary this often, fleet-wide, and only when no SES event has arrived for as long
    SES_CANARY_EVERY_SECS = Some("60"), &[Poller];
    /// the whole fleet's cap in messages/s, below the account's `MaxSendRate` (read with `GetAccount`); 0 or unset: the account's rate
    SES_MAX_SEND_RATE = None, &[Poller];
    /// connect timeout of one SES call
    SES_CONNECT_TIMEOUT_MS = Some("3000"), &[Poller];
    /// read timeout of one SES call; with the connect timeout, one send's worst case
    SES_READ_TIMEOUT_MS = Some("10000"), &[Poller];
    /// the poller's mail provider: `ses` (SES v2, with its feedback loop) or `smtp` (any SMTP server, `SMTP_*`)
    MAILER = Some("ses"), &[Poller];
    /// with `MAILER=smtp`: `smtps://host:465` (implicit TLS) or `smtp://host:587` (STARTTLS, required); no credentials in it
    SMTP_URL = None, &[Poller];
    /// with `MAILER=smtp`: the sender the SMTP provider lets you use, `Name <address>`
    SMTP_FROM_ADDRESS = None, &[Poller];
    /// Secrets Manager secret with the SMTP AUTH `username` and `password` (JSON)
    SMTP_SECRET_ARN = None, &[Poller];
    /// SMTP AUTH user when there is no secret (with `SMTP_PASSWORD`); neither: no AUTH
    SMTP_USERNAME = None, &[Poller];
    /// SMTP AUTH password when there is no secret (with `SMTP_USERNAME`); read by `dev` builds only (local development): a release build refuses it
    SMTP_PASSWORD = None, &[Poller];
    /// extra trusted CA certificates (PEM) for the SMTP server's certificate; the public roots are built in
    SMTP_CA_FILE = None, &[Poller];
    /// opening one SMTP connection: TCP, TLS, greeting, EHLO, STARTTLS and AUTH together
    SMTP_CONNECT_TIMEOUT_MS = Some("3000"), &[Poller];
    /// one message on an open connection: MAIL, RCPT, DATA and the reply to the final `.` together; with the connect timeout, one send's worst case
    SMTP_SEND_TIMEOUT_MS = Some("10000"), &[Poller];
    /// SMTP connections one poller has open at most (its sends in flight are capped to match)
    SMTP_MAX_CONNECTIONS = Some("8"), &[Poller];
    /// the whole fleet's cap in messages/s through SMTP (the provider's limit); 0 or unset: none
    SMTP_MAX_SEND_RATE = None, &[Poller];
    /// through SES's own SMTP interface (`email-smtp.<region>.amazonaws.com`): the configuration set each message names (`X-SES-CONFIGURATION-SET`, with the claim's tags in `X-SES-MESSAGE-TAGS`), so SES's events settle ambiguous sends as for SES v2; unset: nothing reports back
    SMTP_SES_CONFIGURATION_SET = None, &[Poller];
    /// the only AWS account (12 digits) whose SES events are read, with the function's `AWS_REGION`; any other event is refused (the template passes its own account)
    SES_EVENTS_ACCOUNT = None, &[Reader::SesEvents];
    /// the only CloudFormation stack (its ARN) whose custom-resource requests are served, answered only to CloudFormation's response bucket of the function's `AWS_REGION` (the template passes its own stack)
    CUSTOM_RESOURCE_STACK_ID = None, &[Reader::Migrate];
    /// each function's generated login secret, `role=arn,…` (roles `booking_api`, `outbox_poller`, `outbox_sweeper`, `ses_events`): every migration run creates each login (or sets its password to the secret's) in its role, and completes the secret with the database's host, port and name
    DATABASE_LOGIN_SECRET_ARNS = None, &[Reader::Migrate];
    /// `statement_timeout` of the functions' roles (`booking_app`, each function's role, and each login role in them, in this database), set by every migration run (in a stack: `SchemaMigration`'s property `AppStatementTimeoutMs`); 0: none
    APP_STATEMENT_TIMEOUT_MS = Some("30000"), &[Reader::Migrate, Outboxctl];
    /// `idle_in_transaction_session_timeout` of the functions' role, set by every migration run: a forgotten transaction ends instead of holding back vacuum; must exceed the poller's longest batch (its timeout); in a stack: `SchemaMigration`'s property `AppIdleInTransactionTimeoutMs`; 0: none
    APP_IDLE_IN_TRANSACTION_TIMEOUT_MS = Some("300000"), &[Reader::Migrate, Outboxctl];
    /// a PROCESSING row older than this is presumed abandoned; must exceed `POLLER_TIMEOUT_SECS`
    SWEEP_STUCK_AFTER_SECS = Some("300"), &[Sweeper, Outboxctl, Console];
    /// rows per sweep statement
    SWEEP_BATCH_SIZE = Some("500"), &[Sweeper, Outboxctl, Console];
    /// how long after SES's event stream has moved past an ambiguous send (events arrived about messages SES accepted after it could last have reached SES) its own event may still come; after it, with none naming the send, the send is resent
    FEEDBACK_GRACE_SECS = Some("900"), &[Sweeper, Outboxctl, Console];
    /// times one recipient's ambiguous SES send is resent automatically, each only on SES's evidence that the attempt before never reached it; then, or with 0, it is left for an operator
    UNKNOWN_RESENDS_MAX = Some("3"), &[Sweeper, Outboxctl, Console];
    /// DONE events, processed_events and settled sends older than this many days (at least 1) are deleted, then SES's feedback about the sends that are gone
    RETENTION_DAYS = Some("7"), &[Sweeper, Outboxctl, Console];
    /// rows per retention delete
    RETENTION_BATCH_SIZE = Some("1000"), &[Sweeper, Outboxctl, Console];
    /// retention deletes per table per run
    RETENTION_MAX_BATCHES = Some("20"), &[Sweeper, Outboxctl, Console];
    /// an older `Idempotency-Key` is forgotten on read and deleted by retention
    IDEMPOTENCY_KEY_TTL_HOURS = Some("24"), &[Api, Sweeper, Outboxctl, Console];
    /// named fault points for crash tests; only `dev` builds read it
    OUTBOX_FAULT_POINTS = None, FUNCTIONS;
    /// log filter (tracing's `EnvFilter` syntax)
    RUST_LOG = Some("info"), &[Api, Poller, Sweeper, Reader::SesEvents, Reader::Migrate, Console];
}

/// The setting declared under `name`.
pub fn find(name: &str) -> Option<&'static Setting> {
    ALL.iter().copied().find(|s| s.name == name)
}
