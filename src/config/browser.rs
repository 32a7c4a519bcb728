//! `[browser]` and `[browser.proxy]`: attach to a WebDriver or launch chromedriver, the
//! window, limits and proxy, checked. A proxy password may come from the environment (the
//! variable `password_env` names): `resolve` reads it.

use manus_actors::browser::{BrowserSettings, ProxySettings, WebDriverSource};

use super::error::{Lines, Problem};
use super::file::{BrowserToml, ViewportToml};
use super::values::{Bounds, Table, not_web_url, web_url};

/// The browser's settings, with the password written in the file, and the variable whose
/// value (when set) wins over it.
pub(super) fn build(
    b: &BrowserToml,
    lines: Lines,
) -> Result<(BrowserSettings, Option<String>), Problem> {
    let defaults = BrowserSettings::default();
    let table = Table::new("[browser]", lines);
    let chromedriver = table.text(
        &b.chromedriver_path,
        "chromedriver_path",
        "a program's path",
    )?;
    if let Some(urls) = &b.webdriver_urls
        && (b.webdriver_url.is_some() || b.chromedriver_path.is_some())
    {
        return Err(Problem::at(
            lines.of(urls),
            "[browser] webdriver_urls",
            "[browser] webdriver_urls names the WebDriver endpoints to spread browsers over; \
             leave out webdriver_url and chromedriver_path with it"
                .into(),
        ));
    }
    let webdriver = match (&b.webdriver_url, chromedriver) {
        _ if b.webdriver_urls.is_some() => {
            let urls = b.webdriver_urls.as_ref().expect("matched");
            let list = urls.get_ref();
            let bad = list.iter().find_map(|u| not_web_url(u).map(|why| (u, why)));
            if list.is_empty() || bad.is_some() {
                return Err(Problem::at(
                    lines.of(urls),
                    "[browser] webdriver_urls",
                    match bad {
                        Some((u, why)) => format!("[browser] webdriver_urls: \"{u}\" {why}"),
                        None => "[browser] webdriver_urls is empty: name at least one WebDriver endpoint".into(),
                    },
                ));
            }
            WebDriverSource::Pool(
                list.iter()
                    .map(|u| u.trim_end_matches('/').to_string())
                    .collect(),
            )
        }
        (Some(u), Some(_)) => {
            return Err(Problem::at(
                lines.of(u),
                "[browser] webdriver_url",
                "[browser] webdriver_url and chromedriver_path are both set: attach to a running WebDriver \
                 (webdriver_url) or launch chromedriver (chromedriver_path), not both"
                    .into(),
            ));
        }
        (Some(u), None) => WebDriverSource::Url(web_url(u, "[browser] webdriver_url", lines)?),
        (None, Some(p)) => WebDriverSource::Launch(p),
        (None, None) => defaults.webdriver,
    };
    let max_content_length = table
        .number(&b.max_content_length, "max_content_length", CONTENT)?
        .map_or(defaults.max_content_length, |n| n as usize);
    let page_load_timeout = table.seconds(
        &b.page_load_timeout_secs,
        "page_load_timeout_secs",
        defaults.page_load_timeout,
    )?;
    let viewport = match &b.viewport {
        Some(v) => {
            let ViewportToml { width, height } = *v.get_ref();
            if !(200..=8000).contains(&width) || !(200..=8000).contains(&height) {
                return Err(Problem::at(
                    lines.of(v),
                    "[browser] viewport",
                    format!(
                        "[browser] viewport {width}x{height}: width and height must be between 200 and 8000 pixels"
                    ),
                ));
            }
            (width, height)
        }
        None => defaults.viewport,
    };
    let (proxy, password_env) = match &b.proxy {
        Some(p) => {
            let t = p.get_ref();
            let table = Table::new("[browser.proxy]", lines);
            let server = table.filled(&t.server, "server", "the proxy's address")?;
            if let Some(why) = not_a_proxy(&server) {
                return Err(Problem::at(
                    lines.of(&t.server),
                    "[browser.proxy] server",
                    format!("[browser.proxy] server = \"{server}\" {why}"),
                ));
            }
            let username = table.text(&t.username, "username", "a user name")?;
            if let (Some(user), Some((scheme, _))) = (&t.username, server.split_once("://"))
                && scheme != "http"
            {
                return Err(Problem::at(
                    lines.of(user),
                    "[browser.proxy] username",
                    format!(
                        "[browser.proxy] username: a user name and password work with http:// \
                         proxies only, not {scheme}://"
                    ),
                ));
            }
            let proxy = ProxySettings {
                server,
                username,
                password: table.text(&t.password, "password", "the password")?,
            };
            let password_env = table.text(&t.password_env, "password_env", "a variable's name")?;
            (Some(proxy), password_env)
        }
        None => (None, None),
    };
    let settings = BrowserSettings {
        webdriver,
        headless: b.headless.unwrap_or(defaults.headless),
        chromium_path: table.text(&b.chromium_path, "chromium_path", "a program's path")?,
        extra_args: table
            .texts(&b.extra_args, "extra_args", "an argument")?
            .unwrap_or_default(),
        proxy,
        max_content_length,
        page_load_timeout,
        viewport,
        screenshots: b.screenshots.unwrap_or(defaults.screenshots),
    };
    Ok((settings, password_env))
}

/// Characters of page text `extract_content` gives the model.
const CONTENT: Bounds<i64> = Bounds::new(1, 10_000_000, " characters");

/// Why `server` is not a proxy Chromium can use (`HOST:PORT`, or with a scheme of http,
/// https, socks4 or socks5), if it is not.
fn not_a_proxy(server: &str) -> Option<&'static str> {
    let (scheme, rest) = server.split_once("://").unwrap_or(("http", server));
    if !["http", "https", "socks4", "socks5"].contains(&scheme) {
        return Some(
            "has a scheme Chromium's proxies do not take: use http, https, socks4 or socks5",
        );
    }
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    match host_port.parse::<axum::http::uri::Authority>() {
        Ok(a) if !a.host().is_empty() && !host_port.contains('@') => None,
        _ => Some("is not a proxy's address: write HOST:PORT or SCHEME://HOST:PORT"),
    }
}
