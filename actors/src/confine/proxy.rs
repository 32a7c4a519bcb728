//! `[sandbox] network = ["host", "host:port", "*.domain", …]`: confined code reaches the
//! listed hosts, and only them, through an HTTP proxy the runtime runs on 127.0.0.1.
//!
//! The kernel enforces the rest: Landlock lets confined code open TCP connections to the
//! proxy's port alone, seccomp refuses every socket but TCP (no UDP, so no DNS of its own:
//! the proxy resolves names), and TCP fast-open (data sent without `connect`). Code finds
//! the proxy in `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY`, which pip, requests, urllib,
//! curl and git follow. The proxy takes `CONNECT host:port` (HTTPS, any TLS end to end) and
//! absolute-form plain HTTP requests; a host not on the list gets `403` with a reason that
//! names the setting. Landlock's rules are by port, not address: a connection to another
//! machine on the proxy's own (random, high) port number is not refused by the kernel.
//!
//! One proxy per distinct list, on a thread of its own, for the life of the process; at most
//! `CONNECTIONS` at once, a request's head read within `HEAD_TIME`.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Connections the proxy serves at once; more are closed at once.
const CONNECTIONS: usize = 256;
/// How long a client may take to send a request's head.
const HEAD_TIME: Duration = Duration::from_secs(15);
/// How long reaching an allowed host may take.
const CONNECT_TIME: Duration = Duration::from_secs(30);
/// The largest request head taken.
const HEAD_MAX: usize = 16 << 10;
/// The reason a refused request is given (shown by pip, requests and curl).
pub(super) const REFUSED: &str = "host not allowed by [sandbox] network";

/// Where confined code may connect (`[sandbox] network`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Nowhere: no sockets but `socketpair`.
    Off,
    /// Anywhere, as the user can.
    On,
    /// The listed hosts, through the proxy.
    Only(Vec<Host>),
}

/// One entry of an allow-list: a name (or `*.` and a domain, for every name below it) or an
/// address, and a port, or without one, 80 and 443.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Host {
    name: String,
    port: Option<u16>,
}

impl Host {
    /// `host`, `host:port`, `*.domain[:port]`, `[v6 address]:port`; an error says which
    /// forms are taken.
    pub fn parse(text: &str) -> Result<Host, String> {
        let bad = || {
            format!(
                "`{text}` is not a host: use a name (\"pypi.org\"), a name and port \
                 (\"example.com:8443\"), or \"*.\" and a domain (\"*.githubusercontent.com\")"
            )
        };
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') || name.ends_with(']') => {
                (name, Some(port.parse::<u16>().map_err(|_| bad())?))
            }
            _ => (text, None),
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let bare = name.strip_prefix("*.").unwrap_or(name);
        let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':');
        if bare.is_empty() || !bare.chars().all(fits) || port == Some(0) {
            return Err(bad());
        }
        Ok(Host {
            name: name.to_ascii_lowercase(),
            port,
        })
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let name_fits = match self.name.strip_prefix("*.") {
            Some(domain) => host.strip_suffix(domain).is_some_and(|r| r.ends_with('.')),
            None => host == self.name,
        };
        name_fits && self.port.map_or(port == 80 || port == 443, |p| p == port)
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Network::Off => f.write_str("off"),
            Network::On => f.write_str("on"),
            Network::Only(hosts) => {
                let list: Vec<String> = hosts.iter().map(Host::to_string).collect();
                write!(f, "only {}", list.join(", "))
            }
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) if self.name.contains(':') => write!(f, "[{}]:{p}", self.name),
            Some(p) => write!(f, "{}:{p}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

/// The port of the proxy for `hosts`, started on first use.
pub(super) fn port_for(hosts: &[Host]) -> io::Result<u16> {
    static PROXIES: OnceLock<Mutex<HashMap<Vec<Host>, u16>>> = OnceLock::new();
    let mut proxies = PROXIES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(port) = proxies.get(hosts) {
        return Ok(*port);
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let allowed: Arc<[Host]> = hosts.into();
    std::thread::Builder::new()
        .name("sandbox-proxy".into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, allowed).await,
                    Err(e) => tracing::error!("the sandbox's proxy could not listen: {e}"),
                }
            })
        })?;
    proxies.insert(hosts.to_vec(), port);
    Ok(port)
}

async fn serve(listener: TcpListener, allowed: Arc<[Host]>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // dropped: closed at once
        };
        let allowed = allowed.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = relay(client, &allowed).await {
                tracing::debug!("sandbox proxy: {e}");
            }
        });
    }
}

/// Serve one client: read its request's head, check the host, then pass bytes both ways.
async fn relay(mut client: TcpStream, allowed: &[Host]) -> io::Result<()> {
    let Ok(head) = tokio::time::timeout(HEAD_TIME, read_head(&mut client)).await else {
        return answer(&mut client, "408 Request Timeout", "no request in time").await;
    };
    let (head, len) = head?;
    let Some((host, port, tunnel)) = target(&head[..len]) else {
        return answer(
            &mut client,
            "400 Bad Request",
            "send CONNECT host:port or an absolute http:// URL",
        )
        .await;
    };
    if !allowed.iter().any(|h| h.allows(&host, port)) {
        let list: Vec<String> = allowed.iter().map(Host::to_string).collect();
        let why = format!(
            "{host}:{port} is not in [sandbox] network ({})",
            list.join(", ")
        );
        return answer(&mut client, &format!("403 {REFUSED}"), &why).await;
    }
    let upstream = tokio::time::timeout(CONNECT_TIME, TcpStream::connect((host.as_str(), port)));
    let mut upstream = match upstream.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return answer(&mut client, "502 Bad Gateway", &e.to_string()).await,
        Err(_) => return answer(&mut client, "504 Gateway Timeout", "no answer in time").await,
    };
    if tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        upstream.write_all(&head[len..]).await?;
    } else {
        // An absolute-form request goes on as it came, which servers take; later requests
        // on the same connection can only reach the same host.
        upstream.write_all(&head).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// The bytes read up to the end of a request's head, and the head's length.
async fn read_head(client: &mut TcpStream) -> io::Result<(Vec<u8>, usize)> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other(
                "the client left before its request's head",
            ));
        }
        head.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        match httparse::Request::new(&mut headers).parse(&head) {
            Ok(httparse::Status::Complete(len)) => return Ok((head, len)),
            Ok(httparse::Status::Partial) if head.len() < HEAD_MAX => {}
            Ok(httparse::Status::Partial) => {
                return Err(io::Error::other("a request head past 16 KiB"));
            }
            Err(e) => return Err(io::Error::other(format!("a malformed request: {e}"))),
        }
    }
}

/// The host, port and whether it is a tunnel, of a request head.
fn target(head: &[u8]) -> Option<(String, u16, bool)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    request.parse(head).ok()?;
    let (method, path) = (request.method?, request.path?);
    if method.eq_ignore_ascii_case("CONNECT") {
        let url = url::Url::parse(&format!("tunnel://{path}")).ok()?;
        return Some((url.host_str()?.to_string(), url.port()?, true));
    }
    let url = url::Url::parse(path).ok()?;
    (url.scheme() == "http").then_some(())?;
    Some((
        url.host_str()?.to_string(),
        url.port_or_known_default()?,
        false,
    ))
}

async fn answer(client: &mut TcpStream, status: &str, body: &str) -> io::Result<()> {
    let body = format!("manus-rt sandbox proxy: {body}\n");
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(text.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_and_match_as_written() {
        let pypi = Host::parse("PyPI.org").unwrap();
        assert!(pypi.allows("pypi.org", 443) && pypi.allows("pypi.org", 80));
        assert!(!pypi.allows("pypi.org", 22) && !pypi.allows("evil-pypi.org", 443));
        let wild = Host::parse("*.example.com:8443").unwrap();
        assert!(wild.allows("a.b.example.com", 8443));
        assert!(!wild.allows("example.com", 8443) && !wild.allows("badexample.com", 8443));
        assert!(!wild.allows("a.example.com", 443));
        let v6 = Host::parse("[::1]:9000").unwrap();
        assert!(v6.allows("[::1]", 9000));
        assert_eq!(v6.to_string(), "[::1]:9000");
        for bad in ["", "a b", "host:0", "host:99999", "*.", "a/b"] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_request_names_its_target() {
        let connect = b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n";
        assert_eq!(target(connect), Some(("pypi.org".into(), 443, true)));
        let get = b"GET http://example.com/a HTTP/1.1\r\nHost: example.com\r\n\r\n";
        assert_eq!(target(get), Some(("example.com".into(), 80, false)));
        assert_eq!(target(b"GET /relative HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target(b"GET https://x.org/ HTTP/1.1\r\n\r\n"), None);
    }
}
