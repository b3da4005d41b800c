//! Minimal HTTP/1.1 on loopback for test servers and proxies: one message
//! per connection, bodies by Content-Length.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// API Gateway's own limit on a payload.
const MAX_BODY: usize = 10 << 20;

/// One whole HTTP/1.1 message (head and Content-Length body), request or
/// response, whether or not the peer then keeps the connection open.
pub async fn read_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)))
                .unwrap_or(0);
            if len > MAX_BODY {
                return None;
            }
            if buf.len() >= end + 4 + len {
                return Some(buf);
            }
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
