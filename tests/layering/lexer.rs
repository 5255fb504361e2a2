//! Rust source with comments, strings and characters blanked out (newlines
//! kept, so line numbers stay), and the test code taken out: what the
//! import and length checks read. Not a parser: enough of the lexical
//! grammar that a brace or a `crate::` inside a string or a doc comment is
//! not read as code.

/// `src` with every comment, string and char literal replaced by spaces
/// (their newlines kept). Lifetimes stay.
pub fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        let end = if b[i..].starts_with(b"//") {
            b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n)
        } else if b[i..].starts_with(b"/*") {
            block_comment_end(b, i)
        } else if let Some(end) = raw_string_end(b, i) {
            end
        } else if b[i] == b'"' {
            string_end(b, i)
        } else if b[i] == b'\'' {
            char_end(b, i).unwrap_or(i + 1)
        } else {
            i += 1;
            continue;
        };
        let keep = usize::from(b[i] == b'\'' && end == i + 1);
        wipe(&mut out, i + keep, end);
        i = end.max(i + 1);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn block_comment_end(b: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0usize, start);
    while i + 1 < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// The end of `r"…"`, `r#"…"#` or `br#"…"#` starting at `i`, if one does.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    let mut j = i + usize::from(b[i] == b'b');
    if ident_before || b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = j + 1;
    Some(
        b[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(b.len(), |n| body + n + close.len()),
    )
}

fn string_end(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of a char literal at `start`, or `None` for a lifetime.
fn char_end(b: &[u8], start: usize) -> Option<usize> {
    if b.get(start + 1) == Some(&b'\\') {
        let close = b[start + 2..].iter().position(|&c| c == b'\'')?;
        return Some(start + 2 + close + 1);
    }
    // One char of up to four bytes, then the closing quote.
    (2..=5)
        .find(|&n| b.get(start + n) == Some(&b'\''))
        .filter(|&n| {
            std::str::from_utf8(&b[start + 1..start + n]).is_ok_and(|s| s.chars().count() == 1)
        })
        .map(|n| start + n + 1)
}

/// The index just past the brace that closes the one at `open`.
pub fn matching_brace(text: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// Blanked `text` without its `#[cfg(test)] mod x { … }` blocks (newlines
/// kept), and the names of the `#[cfg(test)] mod x;` files it declares.
pub fn without_tests(text: &str) -> (String, Vec<String>) {
    let mut out = text.to_string();
    let mut test_files = Vec::new();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(").map(|i| from + i) {
        from = at + 1;
        let Some(close) = out[at..].find(")]").map(|i| at + i + 2) else {
            break;
        };
        let attr = &out[at..close];
        if !attr.contains("test") || attr.contains("not(test") {
            continue;
        }
        let after = out[close..].trim_start();
        let Some(decl) = after
            .strip_prefix("mod ")
            .or_else(|| after.strip_prefix("pub(crate) mod "))
        else {
            continue;
        };
        let name: String = decl
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let rest = decl[name.len()..].trim_start();
        if rest.starts_with(';') {
            test_files.push(name);
        } else if rest.starts_with('{') {
            let open = out.len() - rest.len();
            let end = matching_brace(&out, open);
            let blanked: String = out[at..end]
                .chars()
                .map(|c| if c == '\n' { c } else { ' ' })
                .collect();
            out.replace_range(at..end, &blanked);
        }
    }
    (out, test_files)
}
