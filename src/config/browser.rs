//! `[browser]` and `[browser.proxy]`: attach to a WebDriver or launch chromedriver, the
//! window, limits and proxy, checked. A proxy password may come from the environment (the
//! variable `password_env` names): `resolve` reads it.

use std::time::Duration;

use manus_actors::browser::{BrowserSettings, ProxySettings, WebDriverSource};
use toml::Spanned;

use super::error::{Lines, Problem};
use super::file::{BrowserToml, ViewportToml};
use super::values::web_url;

/// The browser's settings, with the password written in the file, and the variable whose
/// value (when set) wins over it.
pub(super) fn build(
    b: &BrowserToml,
    lines: Lines,
) -> Result<(BrowserSettings, Option<String>), Problem> {
    let defaults = BrowserSettings::default();
    let webdriver = match (&b.webdriver_url, &b.chromedriver_path) {
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
        (None, Some(p)) => WebDriverSource::Launch(p.clone()),
        (None, None) => defaults.webdriver,
    };
    let positive = |v: Option<Spanned<u64>>, key: &str, default: u64| match v {
        Some(n) if *n.get_ref() == 0 => Err(Problem::at(
            lines.of(&n),
            format!("[browser] {key}"),
            format!("[browser] {key} must be at least 1"),
        )),
        Some(n) => Ok(*n.get_ref()),
        None => Ok(default),
    };
    let max_content_length = positive(
        b.max_content_length
            .as_ref()
            .map(|v| Spanned::new(v.span(), *v.get_ref() as u64)),
        "max_content_length",
        defaults.max_content_length as u64,
    )? as usize;
    let page_load = positive(
        b.page_load_timeout_secs.clone(),
        "page_load_timeout_secs",
        defaults.page_load_timeout.as_secs(),
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
            if t.server.trim().is_empty() {
                return Err(Problem::at(
                    lines.of(p),
                    "[browser.proxy] server",
                    "[browser.proxy] server is empty".into(),
                ));
            }
            let proxy = ProxySettings {
                server: t.server.clone(),
                username: t.username.clone(),
                password: t.password.clone(),
            };
            (Some(proxy), t.password_env.clone())
        }
        None => (None, None),
    };
    let settings = BrowserSettings {
        webdriver,
        headless: b.headless.unwrap_or(defaults.headless),
        chromium_path: b.chromium_path.clone(),
        extra_args: b.extra_args.clone().unwrap_or_default(),
        proxy,
        max_content_length,
        page_load_timeout: Duration::from_secs(page_load),
        viewport,
        screenshots: b.screenshots.unwrap_or(defaults.screenshots),
    };
    Ok((settings, password_env))
}
