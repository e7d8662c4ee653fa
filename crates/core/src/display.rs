//! The like-count text shown under a post.
//!
//! Rule (chosen to never overstate a count, so a number never appears to go *down* when the
//! exact value grows past a unit boundary):
//! - below 10,000: exact, with a thousands separator ("999", "1,234", "9,999");
//! - from 10,000: scaled to K, M or B and **truncated** (not rounded) to 3 significant digits,
//!   with one decimal below 100 units and a trailing ".0" dropped
//!   ("12.3K", "12K", "123K", "999K", "1.2M", "12.3M", "123M", "3.4B").
//!
//! Negative values (impossible once counts converge) render as "0".

/// Render a like count for display.
pub fn count_text(n: i64) -> String {
    if n <= 0 {
        return "0".to_string();
    }
    let n = n as u64;
    if n < 10_000 {
        return with_separator(n);
    }
    let (unit, suffix) = if n < 1_000_000 {
        (1_000, "K")
    } else if n < 1_000_000_000 {
        (1_000_000, "M")
    } else {
        (1_000_000_000, "B")
    };
    let whole = n / unit;
    if whole >= 100 {
        return format!("{}{suffix}", with_separator(whole));
    }
    let tenth = (n % unit) * 10 / unit;
    if tenth == 0 { format!("{whole}{suffix}") } else { format!("{whole}.{tenth}{suffix}") }
}

fn with_separator(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::count_text;

    #[test]
    fn counts_render_as_documented() {
        let cases = [
            (0, "0"),
            (-3, "0"),
            (1, "1"),
            (999, "999"),
            (1_000, "1,000"),
            (1_234, "1,234"),
            (9_999, "9,999"),
            (10_000, "10K"),
            (12_345, "12.3K"),
            (12_399, "12.3K"),
            (99_999, "99.9K"),
            (100_000, "100K"),
            (123_456, "123K"),
            (999_999, "999K"),
            (1_000_000, "1M"),
            (1_234_567, "1.2M"),
            (12_345_678, "12.3M"),
            (999_999_999, "999M"),
            (3_400_000_000, "3.4B"),
            (1_234_000_000_000, "1,234B"),
        ];
        for (n, want) in cases {
            assert_eq!(count_text(n), want, "{n}");
        }
    }

    #[test]
    fn displayed_count_never_exceeds_the_true_count_in_its_unit() {
        // 12,999 must not show as "13K".
        assert_eq!(count_text(12_999), "12.9K");
        assert_eq!(count_text(1_999_999), "1.9M");
    }
}
