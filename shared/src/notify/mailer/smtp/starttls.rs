//! STARTTLS (RFC 3207) done here, not by lettre, so that nothing a man in
//! the middle writes in plain text can be read as the server's answer once
//! TLS is up.
//!
//! lettre reads the plain-text dialogue through a buffered reader and keeps
//! that buffer across its TLS upgrade: bytes that arrived after the
//! server's `220` to STARTTLS (injected by an attacker on the path, the
//! CVE-2011-0411 class) would be read as the first answers inside TLS, and
//! could make the poller record SENT for a message the server refused.
//! Here the greeting, EHLO and STARTTLS are read a byte at a time, so no
//! byte after the `220` is ever consumed, and if any has already arrived
//! the upgrade is refused. The TLS stream is then handed to lettre with a
//! greeting of our own, and lettre says EHLO again inside TLS, as RFC 3207
//! requires; everything after that is read only from TLS.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::classify::{Failure, Stage};

/// The longest reply line read in plain text, and the most lines of one
/// reply: a server that sends more is not an SMTP server we talk to.
const MAX_LINE: usize = 1000;
const MAX_LINES: usize = 100;

/// What a refused upgrade says when bytes followed the `220`.
pub const INJECTED: &str = "the server sent more after its answer to STARTTLS, before TLS began: \
     refused (a man in the middle may be injecting answers)";

/// One reply: its code and its lines' text.
struct Reply {
    code: u16,
    text: String,
}

/// Reads one reply a byte at a time: never a byte past its last line.
async fn read_reply(tcp: &mut TcpStream) -> Result<Reply, Failure> {
    use tokio::io::AsyncReadExt;
    let mut text = Vec::new();
    for _ in 0..MAX_LINES {
        let mut line = Vec::new();
        loop {
            let mut byte = [0u8; 1];
            match tcp.read(&mut byte).await {
                Ok(0) => return Err(Failure::Lost("the server closed the connection".into())),
                Ok(_) => line.push(byte[0]),
                Err(e) => return Err(Failure::Lost(e.to_string())),
            }
            if line.ends_with(b"\r\n") {
                line.truncate(line.len() - 2);
                break;
            }
            if line.len() > MAX_LINE {
                return Err(Failure::Lost("a reply line longer than SMTP allows".into()));
            }
        }
        let line = String::from_utf8_lossy(&line).into_owned();
        let code = line.get(..3).and_then(|c| c.parse::<u16>().ok()).filter(|c| (200..600).contains(c));
        let Some(code) = code else {
            return Err(Failure::Lost(format!("an unreadable reply: {line:?}")));
        };
        text.push(line.get(4..).unwrap_or_default().to_string());
        match line.as_bytes().get(3) {
            Some(b'-') => continue,
            Some(b' ') | None => return Ok(Reply { code, text: text.join(" ") }),
            Some(_) => return Err(Failure::Lost(format!("an unreadable reply: {line:?}"))),
        }
    }
    Err(Failure::Lost("a reply of more lines than SMTP allows".into()))
}

async fn command(tcp: &mut TcpStream, line: &str) -> Result<Reply, Failure> {
    tcp.write_all(format!("{line}\r\n").as_bytes()).await.map_err(|e| Failure::Lost(e.to_string()))?;
    read_reply(tcp).await
}

fn expect(reply: Reply, code: u16) -> Result<Reply, Failure> {
    if reply.code == code {
        Ok(reply)
    } else {
        Err(Failure::Reply(reply.code, reply.text))
    }
}

/// The plain-text part of a STARTTLS connection: the greeting, EHLO
/// (`hello`: our domain), STARTTLS and its `220`, and a check that nothing
/// followed it. On success `tcp` is ready for the TLS handshake.
pub(super) async fn negotiate(tcp: &mut TcpStream, hello: &str) -> Result<(), (Stage, Failure)> {
    let connect = |f| (Stage::Connect, f);
    expect(read_reply(tcp).await.map_err(connect)?, 220).map_err(connect)?;
    let ehlo = expect(command(tcp, &format!("EHLO {hello}")).await.map_err(connect)?, 250).map_err(connect)?;
    // The first line is the server's name; the others its extensions.
    let offers_starttls = ehlo.text.split(' ').any(|word| word.eq_ignore_ascii_case("STARTTLS"));
    if !offers_starttls {
        let why = "the server does not offer STARTTLS, and TLS is required (smtp:// means STARTTLS)";
        return Err((Stage::StartTls, Failure::Tls(why.into())));
    }
    let starttls = |f| (Stage::StartTls, f);
    expect(command(tcp, "STARTTLS").await.map_err(starttls)?, 220).map_err(starttls)?;
    let mut more = [0u8; 1];
    match tcp.try_read(&mut more) {
        Ok(0) => Err(starttls(Failure::Lost("the server closed the connection".into()))),
        Ok(_) => Err(starttls(Failure::Tls(INJECTED.into()))),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(starttls(Failure::Lost(e.to_string()))),
    }
}

/// A stream that reads `greeting` before what the inner stream says: the
/// greeting lettre expects first on a connection it did not open.
#[derive(Debug)]
pub(super) struct Greeted<S> {
    greeting: &'static [u8],
    inner: S,
}

/// What lettre reads first on a connection upgraded here.
const GREETING: &[u8] = b"220 TLS established by STARTTLS\r\n";

impl<S> Greeted<S> {
    pub(super) fn new(inner: S) -> Self {
        Self { greeting: GREETING, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Greeted<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if !self.greeting.is_empty() {
            let n = self.greeting.len().min(buf.remaining());
            buf.put_slice(&self.greeting[..n]);
            self.greeting = &self.greeting[n..];
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Greeted<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
