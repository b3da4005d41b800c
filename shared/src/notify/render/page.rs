//! A [`Card`] written out twice: the text part, line by line, and the HTML
//! part, by the template `shared/templates/mail.html` (askama: checked
//! when compiled, every value escaped). Same facts, same words, same
//! order: a test reads the HTML's visible text back and finds the text
//! part, word for word.

use askama::Template;

use super::card::Card;

/// The inline styles: one column, at most 600 pixels wide and as narrow
/// as the screen; text that breaks anywhere rather than run off it (a
/// long address, a link); contrast at least 4.5:1 (WCAG AA) on both the
/// light card and the dark one.
pub struct Styles {
    pub body: &'static str,
    pub column: &'static str,
    pub card: &'static str,
    pub lead: &'static str,
    pub h1: &'static str,
    pub h2: &'static str,
    pub dl: &'static str,
    pub dt: &'static str,
    pub dd: &'static str,
    pub was: &'static str,
    pub a: &'static str,
    pub description: &'static str,
    pub note: &'static str,
}

const FONT: &str = "-apple-system,BlinkMacSystemFont,'Segoe UI',Roboto,'Helvetica Neue',Arial,'Noto Sans',\
                    'Hiragino Sans','Noto Sans CJK JP','Yu Gothic',sans-serif";

pub const STYLES: Styles = Styles {
    body: const_format::concatcp!(
        "margin:0;padding:0;background:#f3f4f6;color:#1f2328;font-family:",
        FONT,
        ";font-size:16px;line-height:1.5;overflow-wrap:anywhere;word-break:break-word;\
         -webkit-text-size-adjust:100%"
    ),
    column: "max-width:600px;margin:0 auto;padding:12px",
    card: "background:#ffffff;border:1px solid #d0d7de;border-top:4px solid #0969da;border-radius:8px;\
           padding:16px 20px",
    lead: "margin:0 0 4px;color:#57606a;font-size:15px",
    h1: "margin:0 0 12px;font-size:22px;line-height:1.3;font-weight:600",
    h2: "margin:16px 0 0;font-size:17px;font-weight:600",
    dl: "margin:0",
    dt: "margin:12px 0 0;color:#57606a;font-size:14px",
    dd: "margin:0",
    was: "color:#57606a",
    a: "color:#0969da;text-decoration:underline",
    description: "margin:16px 0 0;white-space:pre-line",
    note: "margin:20px 0 0;color:#57606a;font-size:14px",
};

#[derive(Template)]
#[template(path = "mail.html")]
struct Html<'a> {
    card: &'a Card,
    s: &'a Styles,
}

/// The HTML part.
pub fn html(card: &Card) -> String {
    Html { card, s: &STYLES }.render().expect("the template renders any card (tested)")
}

/// The text part.
pub fn text(card: &Card) -> String {
    let mut s = format!("{}\n\n{}\n", card.lead, card.title);
    if !card.changes.is_empty() {
        s.push_str(&format!("\n{}\n", card.changes_heading));
        for c in &card.changes {
            s.push_str(&format!("{}\n  {} {}\n  {} {}\n", c.label, c.now.label, c.now.value, c.was.label, c.was.value));
        }
    }
    s.push('\n');
    for f in &card.facts {
        s.push_str(&format!("{} {}\n", f.label, f.value));
    }
    if let Some(d) = &card.description {
        s.push_str(&format!("\n{d}\n"));
    }
    s.push_str(&format!("\n{}\n", card.note));
    s
}
