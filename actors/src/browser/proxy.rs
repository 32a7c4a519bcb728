//! A loopback forwarder for an HTTP proxy that needs a username and password. Chromium takes
//! no proxy credentials on its command line, so it is pointed at this forwarder instead; the
//! forwarder adds `Proxy-Authorization` to each request head (CONNECT for HTTPS, or a plain
//! HTTP request, sent with `Connection: close` so every request gets its own head) and then
//! relays the bytes both ways.

use std::net::SocketAddr;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::ProxySettings;

/// Request heads larger than this are refused.
const MAX_HEAD: usize = 64 * 1024;

pub struct AuthForwarder {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl AuthForwarder {
    /// Listen on a free loopback port and forward to `proxy.server` with its credentials.
    pub async fn start(proxy: &ProxySettings) -> Result<AuthForwarder, String> {
        let upstream = match proxy.server.split_once("://") {
            Some(("http", rest)) => rest,
            None => proxy.server.as_str(),
            Some((scheme, _)) => {
                return Err(format!(
                    "[browser.proxy] username and password work with http:// proxies only, not {scheme}://"
                ));
            }
        }
        .trim_end_matches('/')
        .to_string();
        let credentials = format!(
            "{}:{}",
            proxy.username.as_deref().unwrap_or(""),
            proxy.password.as_deref().unwrap_or("")
        );
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        );
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot start the proxy forwarder: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot start the proxy forwarder: {e}"))?;
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (upstream, auth) = (upstream.clone(), auth.clone());
                tokio::spawn(async move {
                    if let Err(e) = relay(conn, &upstream, &auth).await {
                        tracing::debug!("proxy forwarder: {e}");
                    }
                });
            }
        });
        Ok(AuthForwarder { addr, task })
    }

    /// The address to give Chromium as `--proxy-server`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for AuthForwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, upstream: &str, auth: &str) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = rewrite_head(&String::from_utf8_lossy(&buf[..end]), auth);
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(head.as_bytes()).await?;
    server.write_all(&buf[end..]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

/// The request head with our credentials in place of any the client sent.
fn rewrite_head(head: &str, auth: &str) -> String {
    let mut lines = head.trim_end().split("\r\n");
    let request = lines.next().unwrap_or("");
    let connect = request.starts_with("CONNECT ");
    let mut out = format!("{request}\r\nProxy-Authorization: {auth}\r\n");
    for line in lines {
        let name = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let dropped = name == "proxy-authorization"
            || (!connect && (name == "connection" || name == "proxy-connection"));
        if !dropped {
            out += line;
            out += "\r\n";
        }
    }
    if !connect {
        out += "Connection: close\r\n";
    }
    out + "\r\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_get_our_credentials_and_plain_requests_close() {
        let head = "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nProxy-Authorization: Basic old\r\nProxy-Connection: keep-alive\r\n\r\n";
        let out = rewrite_head(head, "Basic new");
        assert_eq!(
            out,
            "GET http://a.test/ HTTP/1.1\r\nProxy-Authorization: Basic new\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        );
        let connect = rewrite_head(
            "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            "Basic x",
        );
        assert!(
            connect.starts_with("CONNECT a.test:443 HTTP/1.1\r\nProxy-Authorization: Basic x\r\n")
        );
        assert!(!connect.contains("Connection: close"));
    }
}
