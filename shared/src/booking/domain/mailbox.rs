//! Which spellings of an address reach one mailbox: only what the mail
//! providers in `shared/data/subaddressing.json` document, and nothing at
//! any other domain. A domain may refuse `v+x@` (it bounces) or route it
//! to another mailbox (a catch-all), so folding it to `v@` everywhere
//! would let a bounce of `v+x@`, which anyone can cause, stand for `v@`.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// The list as the file says it.
#[derive(Deserialize)]
struct Providers {
    providers: Vec<Provider>,
}

/// One provider's documented rule.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Provider {
    /// Who, and where it documents the rule: a provider is listed only
    /// with a page (the unit test checks every entry has one).
    #[allow(dead_code)]
    provider: String,
    #[allow(dead_code)]
    documented_at: Vec<String>,
    domains: Vec<String>,
    /// What separates the mailbox from the tag (`+`).
    separator: char,
    /// The local part's dots are ignored (Gmail).
    #[serde(default)]
    dots_ignored: bool,
    /// Every domain of the provider reaches one mailbox of this domain
    /// (googlemail.com is gmail.com).
    mailbox_domain: Option<String>,
}

/// A domain's rule.
struct Rule {
    separator: char,
    dots_ignored: bool,
    mailbox_domain: Option<String>,
}

fn rules() -> &'static HashMap<String, Rule> {
    static RULES: OnceLock<HashMap<String, Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let list: Providers = serde_json::from_str(include_str!("../../../data/subaddressing.json"))
            .expect("shared/data/subaddressing.json is checked by its unit test");
        list.providers
            .into_iter()
            .flat_map(|p| {
                p.domains.into_iter().map(move |d| {
                    (
                        d,
                        Rule {
                            separator: p.separator,
                            dots_ignored: p.dots_ignored,
                            mailbox_domain: p.mailbox_domain.clone(),
                        },
                    )
                })
            })
            .collect()
    })
}

/// The mailbox `local@domain` (lower case, as parsed) reaches.
pub(super) fn of(local: &str, domain: &str) -> String {
    let Some(rule) = rules().get(domain) else {
        return format!("{local}@{domain}");
    };
    let base = local.split(rule.separator).next().filter(|l| !l.is_empty()).unwrap_or(local);
    let base = if rule.dots_ignored { base.replace('.', "") } else { base.to_string() };
    format!("{base}@{}", rule.mailbox_domain.as_deref().unwrap_or(domain))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_parses_and_names_where_each_rule_is_documented() {
        let list: Providers = serde_json::from_str(include_str!("../../../data/subaddressing.json")).unwrap();
        let mut seen = std::collections::HashSet::new();
        for p in &list.providers {
            assert!(p.documented_at.iter().all(|u| u.starts_with("https://")), "{}: no page documents it", p.provider);
            assert!(!p.documented_at.is_empty(), "{}", p.provider);
            for d in &p.domains {
                assert_eq!(d, &d.to_ascii_lowercase(), "{d}: domains are lower case");
                assert!(seen.insert(d.clone()), "{d} is listed twice");
            }
            if let Some(m) = &p.mailbox_domain {
                assert!(p.domains.contains(m), "{}: its mailbox domain is one of its domains", p.provider);
            }
        }
        assert_eq!(rules().len(), seen.len());
    }
}
