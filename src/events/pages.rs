//! The pages a recipient sees when they leave (`/unsubscribe/{token}`, [`super::one_click`]):
//! the confirmation with its one button, the result of the click, a stale or forged link —
//! in the reader's language by `Accept-Language`, naming the sender, styled by a stylesheet
//! `events` serves itself ([`CSS`], at `/unsubscribe/page.css`: the pages' CSP allows nothing
//! else, and no script).
//!
//! - **The texts** are one JSON file per language in `src/events/texts/` (`en.json`,
//!   `ja.json`), each with every key of [`KEYS`]; another language is one file and one line of
//!   [`BUILT_IN`]. `{sender}` is the one placeholder. The operator may override any text, or
//!   add a language, with `UNSUBSCRIBE_PAGE_TEXTS` (a JSON file `{"ja": {"done_body": …}}`,
//!   checked at start: known keys, plain text of at most [`MAX_TEXT`] characters, no control
//!   character, `{sender}` the only placeholder; a new language needs every key) — escaped as
//!   any text, never markup. `UNSUBSCRIBE_PAGE_LANG` (default `en`) is the language of a
//!   reader who asks for none we have.
//! - **The language** is RFC 4647 lookup over `Accept-Language`: the highest `q` first, a tag
//!   matching ours exactly or by its primary subtag (`ja-JP` → `ja`), `q=0` never; written
//!   as the page's `lang` and its `Content-Language`.
//! - **The sender** is the display name of the campaign's `From` (`configure --from "News
//!   <news@example.com>"` → News), its domain when it has none — never an address — and
//!   `unknown_sender` when the token does not verify or the campaign has no sender.

use std::collections::BTreeMap;

use maud::{html, Markup, DOCTYPE};

/// The stylesheet, served at `/unsubscribe/page.css`.
pub const CSS: &str = include_str!("assets/unsubscribe.css");

/// Every text a language gives.
pub const KEYS: [&str; 15] = [
    "confirm_title",
    "confirm_lead",
    "confirm_detail",
    "confirm_button",
    "done_title",
    "done_body",
    "invalid_title",
    "invalid_body",
    "archived_title",
    "archived_body",
    "retry_title",
    "retry_body",
    "refused_title",
    "refused_body",
    "unknown_sender",
];

/// The languages built in: (tag, its texts).
pub const BUILT_IN: [(&str, &str); 2] = [
    ("en", include_str!("texts/en.json")),
    ("ja", include_str!("texts/ja.json")),
];

/// The longest text an operator may give.
pub const MAX_TEXT: usize = 1000;

/// Which page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// `GET`: the question and its one button.
    Confirm,
    /// The click is committed.
    Done,
    /// The token does not verify.
    Invalid,
    /// A genuine link whose row and address are gone (archived before it kept them).
    Archived,
    /// The database did not answer: nothing changed yet.
    Retry,
    /// A `POST` that is not RFC 8058's one click.
    Refused,
}

impl Page {
    /// The title's key and the body's.
    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Page::Confirm => ("confirm_title", "confirm_lead"),
            Page::Done => ("done_title", "done_body"),
            Page::Invalid => ("invalid_title", "invalid_body"),
            Page::Archived => ("archived_title", "archived_body"),
            Page::Retry => ("retry_title", "retry_body"),
            Page::Refused => ("refused_title", "refused_body"),
        }
    }
}

/// One language's texts, every key present.
#[derive(Debug, Clone, PartialEq)]
pub struct Texts {
    pub lang: String,
    texts: BTreeMap<String, String>,
}

impl Texts {
    fn get(&self, key: &str) -> &str {
        self.texts.get(key).map(String::as_str).unwrap_or_default()
    }
}

/// The pages' texts in every language, and the default one.
#[derive(Debug, Clone, PartialEq)]
pub struct Pages {
    langs: Vec<Texts>,
    default: usize,
}

impl Default for Pages {
    /// The built-in languages, English by default.
    fn default() -> Self {
        Self::new(None).expect("the built-in texts are complete")
    }
}

impl Pages {
    /// The built-in texts and `overrides` (the JSON of `UNSUBSCRIBE_PAGE_TEXTS`) over them,
    /// English the default: what is wrong, if anything, names the language and the key.
    pub fn new(overrides: Option<&str>) -> Result<Self, String> {
        let mut langs = Vec::new();
        for (lang, json) in BUILT_IN {
            let texts: BTreeMap<String, String> =
                serde_json::from_str(json).map_err(|e| format!("{lang}: {e}"))?;
            langs.push(Texts {
                lang: lang.to_string(),
                texts,
            });
        }
        if let Some(json) = overrides {
            let given: BTreeMap<String, BTreeMap<String, String>> = serde_json::from_str(json)
                .map_err(|e| {
                    format!("is not a JSON object of languages of texts ({{\"ja\": {{\"done_body\": \"…\"}}}}): {e}")
                })?;
            for (lang, texts) in given {
                merge(&mut langs, &lang, texts)?;
            }
        }
        for t in &langs {
            if let Some(missing) = KEYS.iter().find(|k| !t.texts.contains_key(**k)) {
                return Err(format!("language {} has no text {missing}", t.lang));
            }
        }
        Ok(Self { langs, default: 0 })
    }

    /// The same pages with `lang` (`UNSUBSCRIBE_PAGE_LANG`) for a reader who asks for none of
    /// ours; a language they do not have is refused.
    pub fn with_default(self, lang: &str) -> Result<Self, String> {
        let default = self
            .langs
            .iter()
            .position(|t| t.lang == lang.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "names no language of the pages (they are {})",
                    self.languages().join(", ")
                )
            })?;
        Ok(Self { default, ..self })
    }

    /// The texts for a reader whose browser sent `accept` (`Accept-Language`).
    pub fn for_reader(&self, accept: Option<&str>) -> &Texts {
        let tags: Vec<&str> = self.langs.iter().map(|t| t.lang.as_str()).collect();
        &self.langs[lookup(accept, &tags).unwrap_or(self.default)]
    }

    /// The languages offered, in order.
    pub fn languages(&self) -> Vec<&str> {
        self.langs.iter().map(|t| t.lang.as_str()).collect()
    }
}

/// `texts` over language `lang` (a new one is added), each checked.
fn merge(
    langs: &mut Vec<Texts>,
    lang: &str,
    texts: BTreeMap<String, String>,
) -> Result<(), String> {
    let tag = lang.trim().to_ascii_lowercase();
    let plausible = !tag.is_empty()
        && tag.len() <= 35
        && tag
            .split('-')
            .all(|p| !p.is_empty() && p.len() <= 8 && p.chars().all(|c| c.is_ascii_alphanumeric()));
    if !plausible {
        return Err(format!(
            "'{}' is not a language tag (BCP 47: ja, en, pt-br)",
            lang.escape_debug()
        ));
    }
    for (key, text) in &texts {
        check(&tag, key, text)?;
    }
    match langs.iter_mut().find(|t| t.lang == tag) {
        Some(t) => t.texts.extend(texts),
        None => langs.push(Texts { lang: tag, texts }),
    }
    Ok(())
}

/// One text an operator gave: a known key, plain text of at most [`MAX_TEXT`] characters, no
/// control character, no placeholder but `{sender}`.
fn check(lang: &str, key: &str, text: &str) -> Result<(), String> {
    let at = || format!("{lang}.{}", key.escape_debug());
    if !KEYS.contains(&key) {
        return Err(format!(
            "{} is not a text of the pages (they are {})",
            at(),
            KEYS.join(", ")
        ));
    }
    if text.trim().is_empty() || text.chars().count() > MAX_TEXT {
        return Err(format!("{} must hold 1 to {MAX_TEXT} characters", at()));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{} holds a control character", at()));
    }
    if text.replace("{sender}", "").contains(['{', '}']) {
        return Err(format!("{} has a placeholder other than {{sender}}", at()));
    }
    Ok(())
}

/// RFC 4647 lookup of `accept` over `tags`: the index of the best match, `None` for none (or
/// `*`, or no header).
pub fn lookup(accept: Option<&str>, tags: &[&str]) -> Option<usize> {
    let mut ranges: Vec<(f32, String)> = accept?
        .split(',')
        .filter_map(|part| {
            let mut bits = part.split(';');
            let tag = bits.next()?.trim().to_ascii_lowercase();
            let q = bits
                .find_map(|b| b.trim().strip_prefix("q=").map(|v| v.trim().parse::<f32>()))
                .unwrap_or(Ok(1.0))
                .ok()?;
            (!tag.is_empty() && q > 0.0 && q <= 1.0).then_some((q, tag))
        })
        .collect();
    // Highest quality first; equal ones keep the reader's order.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, range) in ranges {
        if range == "*" {
            return None;
        }
        let primary = range.split('-').next().unwrap_or_default();
        if let Some(i) = tags.iter().position(|t| *t == range) {
            return Some(i);
        }
        if let Some(i) = tags
            .iter()
            .position(|t| t.split('-').next() == Some(primary))
        {
            return Some(i);
        }
    }
    None
}

/// The sender as a page names it: the display name of `from`, else its domain; `None` when
/// there is no sender (or it does not parse). Never the address.
pub fn sender_name(from: Option<&str>) -> Option<String> {
    let mailbox = crate::mailbox::Mailbox::parse(from?).ok()?;
    match mailbox.name {
        Some(name) if !name.trim().is_empty() => Some(name.trim().to_string()),
        _ => mailbox.addr.rsplit_once('@').map(|(_, d)| d.to_string()),
    }
}

/// `page` in `texts`, naming `sender` (or `unknown_sender`), as a whole HTML document.
pub fn render(texts: &Texts, page: Page, sender: Option<&str>) -> String {
    let sender = sender.unwrap_or_else(|| texts.get("unknown_sender"));
    let (title, body) = page.keys();
    let named = page != Page::Invalid && page != Page::Retry;
    html! {
        (DOCTYPE)
        html lang=(texts.lang) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (texts.get(title)) }
                link rel="stylesheet" href="page.css";
            }
            body {
                main {
                    @if named { p.sender { (sender) } }
                    h1 { (texts.get(title)) }
                    p { (with_sender(texts.get(body), sender)) }
                    @if page == Page::Confirm {
                        p.detail { (with_sender(texts.get("confirm_detail"), sender)) }
                        form method="post" {
                            input type="hidden" name="List-Unsubscribe" value="One-Click";
                            button type="submit" { (texts.get("confirm_button")) }
                        }
                    }
                }
            }
        }
    }
    .into_string()
}

/// `text` with each `{sender}` as the sender's name, in bold; the rest escaped text.
fn with_sender(text: &str, sender: &str) -> Markup {
    let mut parts = text.split("{sender}");
    let first = parts.next().unwrap_or_default();
    html! {
        (first)
        @for rest in parts { strong { (sender) } (rest) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_language_gives_every_text_and_only_the_sender_placeholder() {
        let pages = Pages::default();
        assert_eq!(pages.languages(), ["en", "ja"]);
        for (lang, json) in BUILT_IN {
            let texts: BTreeMap<String, String> = serde_json::from_str(json).unwrap();
            let keys: Vec<&str> = texts.keys().map(String::as_str).collect();
            let mut want = KEYS.to_vec();
            want.sort_unstable();
            assert_eq!(keys, want, "{lang}");
            for (key, text) in &texts {
                check(lang, key, text).unwrap();
            }
        }
    }

    #[test]
    fn the_reader_gets_the_best_language_we_have() {
        let tags = ["en", "ja"];
        assert_eq!(lookup(Some("ja"), &tags), Some(1));
        assert_eq!(lookup(Some("ja-JP,ja;q=0.9,en-US;q=0.8"), &tags), Some(1));
        assert_eq!(lookup(Some("en-GB,en;q=0.9,ja;q=0.5"), &tags), Some(0));
        assert_eq!(lookup(Some("fr-FR, ja;q=0.3, en;q=0.7"), &tags), Some(0));
        assert_eq!(lookup(Some("fr, de"), &tags), None);
        assert_eq!(
            lookup(Some("ja;q=0, en;q=0.1"), &tags),
            Some(0),
            "q=0 is never"
        );
        assert_eq!(lookup(Some("*"), &tags), None);
        assert_eq!(lookup(Some(";;,q=,"), &tags), None);
        assert_eq!(lookup(None, &tags), None);
        assert_eq!(lookup(Some("pt-BR"), &["en", "pt-br"]), Some(1));
        let pages = Pages::default().with_default("ja").unwrap();
        assert_eq!(pages.for_reader(Some("fr")).lang, "ja", "the default");
        assert_eq!(pages.for_reader(Some("en-US")).lang, "en");
    }

    #[test]
    fn the_sender_is_named_by_its_display_name_or_domain_never_its_address() {
        assert_eq!(
            sender_name(Some("News <news@example.com>")).as_deref(),
            Some("News")
        );
        assert_eq!(
            sender_name(Some("\"Shop, Inc.\" <shop@example.co.jp>")).as_deref(),
            Some("Shop, Inc.")
        );
        assert_eq!(
            sender_name(Some("news@example.com")).as_deref(),
            Some("example.com")
        );
        assert_eq!(sender_name(None), None);
        assert_eq!(sender_name(Some("not a mailbox")), None);
    }

    #[test]
    fn a_page_is_in_its_language_names_the_sender_and_escapes_every_text() {
        let pages = Pages::default();
        let ja = pages.for_reader(Some("ja"));
        let html = render(ja, Page::Confirm, Some("News"));
        assert!(html.contains("<html lang=\"ja\">"), "{html}");
        assert!(html.contains("<strong>News</strong>からのメール"), "{html}");
        assert!(html.contains("配信を停止する</button>"), "{html}");
        let hostile = render(ja, Page::Done, Some("<script>x</script>"));
        assert!(!hostile.contains("<script>"), "{hostile}");
        let invalid = render(pages.for_reader(None), Page::Invalid, Some("News"));
        assert!(!invalid.contains("News"), "a forged link names no sender");
        let unknown = render(pages.for_reader(None), Page::Done, None);
        assert!(unknown.contains("this sender"), "{unknown}");
    }

    #[test]
    fn the_operators_texts_are_checked_and_override_ours() {
        let ok = Pages::new(Some(r#"{"JA": {"done_title": "停止しました"}}"#)).unwrap();
        let html = render(ok.for_reader(Some("ja")), Page::Done, Some("News"));
        assert!(html.contains("停止しました"), "{html}");
        for (bad, says) in [
            (
                r#"{"ja": {"done_titel": "x"}}"#,
                "is not a text of the pages",
            ),
            (r#"{"ja": {"done_title": ""}}"#, "1 to 1000"),
            (r#"{"ja": {"done_title": "a\nb"}}"#, "control character"),
            (r#"{"ja": {"done_title": "{name}"}}"#, "placeholder"),
            (
                r#"{"fr": {"done_title": "Désabonné"}}"#,
                "language fr has no text",
            ),
            (r#"{"../x": {}}"#, "not a language tag"),
            (r#"["ja"]"#, "JSON object"),
        ] {
            let e = Pages::new(Some(bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let no_fr = Pages::default().with_default("fr").unwrap_err();
        assert!(no_fr.contains("names no language"), "{no_fr}");
    }
}
