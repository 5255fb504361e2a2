//! The `page_directives` and `visit_times` fuzz targets run without
//! libFuzzer (cargo-fuzz needs a nightly toolchain and sanitizer builds of
//! every dependency): the same properties (`fuzz/checks/`), on inputs grown
//! from seeds by byte mutations and splices, from a fixed seed so that a run
//! is repeatable. `FUZZ_REPLAY_RUNS` sets the inputs per target (default
//! 20,000); a failing input is printed escaped, to be added to the seeds.

#[path = "../../../fuzz/checks/page_directives.rs"]
mod page_directives;
#[path = "../../../fuzz/checks/visit_times.rs"]
mod visit_times;

const PAGE_SEEDS: &[&str] = &[
    "noindex, nofollow\n<meta name=\"robots\" content=\"noai\">",
    "examplebot: noindex\n<html><head><meta name=ROBOTS content='none'></head>",
    "ExampleBot-AI: noai, noimageai\n<meta content=\"noimageai\" name=\"examplebot-ai\">",
    "none\n<meta name=\"googlebot\" content=\"noindex\"><!-- <meta name=robots content=noai> -->",
    "unavailable_after: 25 Jun 2010 15:00:00 PST\n<meta name=\"robots\" content=\"noai",
    "noai\n<META NAME=\"Robots\" CONTENT=\"NoAI, NoIndex\"/><meta name=robots>",
    "examplebot: none, examplebot-ai: noai\n<script>'<meta name=\"robots\" content=\"noai\">'</script>",
];

const VISIT_SEEDS: &[&str] = &[
    "0600-0845",
    "1/5",
    "1/10m",
    "3/1h",
    "2359-0001",
    "0000-2400",
    "1/0",
    "0/5",
    "99",
    "10/1s 0600-0845",
    "1/5\nVisit-time: 0100-0200",
    "06:00-08:45",
    "18446744073709551615/1",
];

/// Bytes a parser of these fields treats specially, and the words it looks for.
const DICT: &[&[u8]] = &[
    b":",
    b",",
    b"-",
    b"/",
    b"=",
    b"<",
    b">",
    b"\"",
    b"'",
    b" ",
    b"\t",
    b"\n",
    b"\r",
    b"0",
    b"9",
    b"24",
    b"60",
    b"\xff",
    b"\xc3\xa9",
    b"noai",
    b"noimageai",
    b"none",
    b"noindex",
    b"nofollow",
    b"meta",
    b"robots",
    b"content",
    b"name",
    b"examplebot",
    b"<!--",
    b"-->",
    b"m",
    b"h",
    b"s",
    b"99999999999999999999",
];

/// xorshift64*: enough for mutations, and the same inputs on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seeds: &[&str], input: &mut Vec<u8>) {
    match rng.below(6) {
        0 if !input.is_empty() => {
            let i = rng.below(input.len());
            input[i] ^= 1 << rng.below(8);
        }
        1 => {
            let word = DICT[rng.below(DICT.len())];
            let at = rng.below(input.len() + 1);
            input.splice(at..at, word.iter().copied());
        }
        2 if !input.is_empty() => {
            let from = rng.below(input.len());
            let to = (from + 1 + rng.below(8)).min(input.len());
            input.drain(from..to);
        }
        3 if !input.is_empty() => {
            let from = rng.below(input.len());
            let to = (from + 1 + rng.below(16)).min(input.len());
            let part = input[from..to].to_vec();
            let at = rng.below(input.len() + 1);
            input.splice(at..at, part);
        }
        4 => {
            let other = seeds[rng.below(seeds.len())].as_bytes();
            let cut = rng.below(other.len() + 1);
            let at = rng.below(input.len() + 1);
            input.truncate(at);
            input.extend_from_slice(&other[cut..]);
        }
        _ => {
            let at = rng.below(input.len() + 1);
            input.insert(at, rng.next() as u8);
        }
    }
    // Past a few KiB an input only repeats itself.
    input.truncate(4096);
}

/// Runs `check` on every seed and on `FUZZ_REPLAY_RUNS` inputs grown from
/// them, failing on the first input that breaks a property.
fn replay(name: &str, seeds: &[&str], check: fn(&[u8])) {
    let runs = std::env::var("FUZZ_REPLAY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000usize);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // The run's time, for the figure printed; nothing is judged by it.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let mut input = Vec::new();
    for n in 0..seeds.len() + runs {
        if n < seeds.len() {
            input = seeds[n].as_bytes().to_vec();
        } else {
            // Mostly go on from the last input (deeper changes), sometimes
            // start again from a seed.
            if rng.below(8) == 0 {
                input = seeds[rng.below(seeds.len())].as_bytes().to_vec();
            }
            for _ in 0..=rng.below(4) {
                mutate(&mut rng, seeds, &mut input);
            }
        }
        let caught = std::panic::catch_unwind(|| check(&input));
        assert!(
            caught.is_ok(),
            "{name}: input {n} broke a property: {:?}",
            String::from_utf8_lossy(&input)
        );
    }
    eprintln!(
        "{name}: {} inputs in {:.1} s",
        seeds.len() + runs,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn page_directives_hold_their_properties_on_mutated_inputs() {
    replay("page_directives", PAGE_SEEDS, page_directives::check);
}

#[test]
fn visit_times_hold_their_properties_on_mutated_inputs() {
    replay("visit_times", VISIT_SEEDS, visit_times::check);
}
