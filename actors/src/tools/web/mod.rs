//! What the web tools share: reading HTML (`html`), pages as markdown (`markdown`), fetching
//! pages over HTTP (`fetch`) and the search engines (`search`).

pub mod fetch;
pub mod html;
pub mod markdown;
pub mod search;
