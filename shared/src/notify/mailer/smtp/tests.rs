//! The mailer's unit tests: the place of the final `.` over a scripted pipe.
use super::*;

/// Where the scripted server hangs up.
#[derive(Clone, Copy)]
enum Cut {
    AtMail,
    MidBody,
    AfterDot,
    Never,
}

/// Runs one transaction against a server that hangs up at `cut`.
async fn transact_cut_at(cut: Cut, reused: bool) -> Ended {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    // A small pipe: the body (about 8 KB) is written as the server reads.
    let (client, server) = tokio::io::duplex(256);
    let script = tokio::spawn(async move {
        let (r, mut w) = tokio::io::split(server);
        let mut r = tokio::io::BufReader::new(r);
        let mut line = String::new();
        w.write_all(b"220 scripted ESMTP\r\n").await.unwrap();
        for reply in ["250 scripted\r\n", "250 sender ok\r\n", "250 recipient ok\r\n", "354 go on\r\n"] {
            line.clear();
            r.read_line(&mut line).await.unwrap();
            if line.starts_with("MAIL") && matches!(cut, Cut::AtMail) {
                return;
            }
            w.write_all(reply.as_bytes()).await.unwrap();
        }
        if matches!(cut, Cut::MidBody) {
            let mut some = [0u8; 512];
            r.read_exact(&mut some).await.unwrap();
            return;
        }
        loop {
            line.clear();
            assert!(r.read_line(&mut line).await.unwrap() > 0, "the client hung up first");
            if line == ".\r\n" {
                break;
            }
        }
        if matches!(cut, Cut::Never) {
            w.write_all(b"250 queued\r\n").await.unwrap();
            let _ = r.read_line(&mut line).await; // until the client goes
        }
    });
    let config = SmtpConfig::for_tests("127.0.0.1", 25, 1);
    let mailer = SmtpMailer::new(config).unwrap();
    let conn = AsyncSmtpConnection::connect_with_transport(
        // lettre's connection over an in-memory pipe to the scripted
        // server, so the cut falls exactly where the test says.
        Box::new(Transport(client, ([127, 0, 0, 1], 25).into())),
        &ClientId::Domain("test".into()),
    )
    .await
    .unwrap();
    let raw: Vec<u8> = (0..120).flat_map(|i| format!("Line {i:03} {}\r\n", "x".repeat(60)).into_bytes()).collect();
    let to: Address = "alice@example.com".parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let ended = mailer.transact(Box::new(conn), reused, &to, &raw, "id@example.com", deadline).await;
    if !matches!(cut, Cut::Never) {
        script.await.unwrap();
    }
    ended
}

fn outcome(ended: Ended) -> &'static str {
    match ended {
        Ended::Outcome(o, _) => o.kind(),
        Ended::Stale(_) => "stale",
    }
}

#[tokio::test]
async fn a_connection_cut_while_the_body_is_written_is_a_known_failure() {
    assert_eq!(outcome(transact_cut_at(Cut::MidBody, false).await), "retryable");
}

#[tokio::test]
async fn a_connection_cut_right_after_the_final_dot_is_unknown() {
    assert_eq!(outcome(transact_cut_at(Cut::AfterDot, false).await), "unknown");
}

#[tokio::test]
async fn the_whole_transaction_sends_and_keeps_the_connection() {
    match transact_cut_at(Cut::Never, false).await {
        Ended::Outcome(SendOutcome::Sent { message_id }, Some(_)) => assert_eq!(message_id, "id@example.com"),
        _ => panic!("expected Sent with the connection kept"),
    }
}

#[tokio::test]
async fn a_kept_connection_cut_at_mail_is_stale_and_a_new_one_a_known_failure() {
    assert_eq!(outcome(transact_cut_at(Cut::AtMail, true).await), "stale");
    assert_eq!(outcome(transact_cut_at(Cut::AtMail, false).await), "retryable");
}

/// Low 8 of issue 37: a release build refuses a password in plain
/// environment (only the secret); a dev build reads it, for `make dev`.
#[test]
fn a_release_build_refuses_smtp_password_in_plain_environment() {
    use super::config::{credentials, Credentials};
    let s = |v: &str| Some(v.to_string());
    let plain = (None, s("user"), s("a-password"));
    let refused = credentials(false, plain.clone()).unwrap_err().to_string();
    assert!(refused.contains("SMTP_PASSWORD") && refused.contains("SMTP_SECRET_ARN"), "{refused}");
    assert!(!refused.contains("a-password"), "{refused}");
    assert!(credentials(false, (None, None, s("a-password"))).is_err());
    let login = Login { username: "user".into(), password: "a-password".into() };
    assert_eq!(credentials(true, plain).unwrap(), Credentials::Plain(login));
    assert_eq!(credentials(false, (s("arn:x"), None, None)).unwrap(), Credentials::Secret("arn:x".into()));
    assert_eq!(credentials(false, (None, None, None)).unwrap(), Credentials::None);
    assert!(credentials(true, (s("arn:x"), s("user"), None)).is_err(), "one place only");
}

/// A server, or a man in the middle, that answers STARTTLS with `220` and
/// then, in plain text, the answers it wants read inside TLS; `apart`:
/// those come in a write of their own, a moment later.
async fn injecting_server(apart: bool) -> u16 {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (read, mut write) = socket.into_split();
        let mut lines = BufReader::new(read).lines();
        write.write_all(b"220 mx.example.com ESMTP\r\n").await.unwrap();
        while let Ok(Some(line)) = lines.next_line().await {
            let injected = b"250 mx.example.com\r\n250 2.0.0 Ok: queued as FORGED\r\n";
            if line.starts_with("EHLO") {
                write.write_all(b"250-mx.example.com\r\n250-PIPELINING\r\n250 STARTTLS\r\n").await.unwrap();
            } else if line == "STARTTLS" && apart {
                write.write_all(b"220 2.0.0 Ready to start TLS\r\n").await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
                write.write_all(injected).await.unwrap();
            } else if line == "STARTTLS" {
                let mut all = b"220 2.0.0 Ready to start TLS\r\n".to_vec();
                all.extend_from_slice(injected);
                write.write_all(&all).await.unwrap();
            }
        }
    });
    port
}

/// Low 2 of issue 37, as the attack: answers injected in plain text right
/// after the `220` to STARTTLS are never read as the server's: the upgrade
/// is refused (a configuration error, so an operator sees the reason), and
/// no connection is made to send on.
#[tokio::test]
async fn starttls_answers_injected_before_tls_are_refused() {
    let port = injecting_server(false).await;
    let mailer = SmtpMailer::new(SmtpConfig::for_tests("127.0.0.1", port, 1)).unwrap();
    match mailer.connect().await {
        Err(SendOutcome::Misconfigured { reason }) => assert!(reason.contains(starttls::INJECTED), "{reason}"),
        Err(other) => panic!("refused for another reason: {other:?}"),
        Ok(_) => panic!("a connection was made over injected answers"),
    }
}

/// The same lines sent a moment after the `220`: they reach the TLS
/// handshake, which fails on them; never an answer.
#[tokio::test]
async fn starttls_answers_injected_a_moment_later_fail_the_handshake() {
    let port = injecting_server(true).await;
    let mailer = SmtpMailer::new(SmtpConfig::for_tests("127.0.0.1", port, 1)).unwrap();
    match mailer.connect().await {
        Err(SendOutcome::Misconfigured { reason }) => assert!(reason.contains("TLS"), "{reason}"),
        Err(other) => panic!("refused for another reason: {other:?}"),
        Ok(_) => panic!("a connection was made over injected answers"),
    }
}
