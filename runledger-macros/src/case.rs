//! Case conversions for generated names: the payload struct of a job fn, the default name of a
//! workflow struct.

use syn::Ident;

/// `send_email` → `SendEmail` (the span stays on the fn name).
pub(crate) fn pascal_case(ident: &Ident) -> Ident {
    let raw = ident.to_string();
    let mut out = String::new();
    for part in raw
        .trim_start_matches("r#")
        .split('_')
        .filter(|p| !p.is_empty())
    {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if out.is_empty() {
        out.push_str("Payload");
    }
    Ident::new(&out, ident.span())
}

/// `ResearchProfile` → `research_profile`, `HTTPCrawl` → `http_crawl`: a word starts at an
/// upper-case letter after a lower-case letter or a digit, and at the last upper-case letter
/// of an acronym that a lower-case letter follows.
pub(crate) fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.trim_start_matches("r#").chars().collect();
    let mut out = String::with_capacity(chars.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let previous = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let starts_word = match previous {
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_uppercase() => next.is_some_and(char::is_lowercase),
                _ => false,
            };
            if starts_word {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proc_macro2::Span;

    use super::*;

    fn pascal(name: &str) -> String {
        let ident = match name.strip_prefix("r#") {
            Some(raw) => Ident::new_raw(raw, Span::call_site()),
            None => Ident::new(name, Span::call_site()),
        };
        pascal_case(&ident).to_string()
    }

    #[test]
    fn fn_names_become_pascal_case_payloads() {
        assert_eq!(pascal("send_email"), "SendEmail");
        assert_eq!(pascal("crawl"), "Crawl");
        assert_eq!(pascal("fetch_v2_page"), "FetchV2Page");
        assert_eq!(pascal("__private_job"), "PrivateJob");
        assert_eq!(pascal("r#type"), "Type");
        assert_eq!(pascal("_"), "Payload");
    }

    #[test]
    fn struct_names_become_snake_case_with_acronyms_kept_whole() {
        assert_eq!(snake_case("ResearchProfile"), "research_profile");
        assert_eq!(snake_case("HTTPCrawl"), "http_crawl");
        assert_eq!(snake_case("MyHTTP"), "my_http");
        assert_eq!(snake_case("HTTP"), "http");
        assert_eq!(snake_case("Crawl"), "crawl");
        assert_eq!(snake_case("ReportV2"), "report_v2");
        assert_eq!(snake_case("V2Report"), "v2_report");
        assert_eq!(snake_case("PDFToHTMLExport"), "pdf_to_html_export");
        assert_eq!(snake_case("r#Match"), "match");
    }
}
