//! The end of a site's evidence against the witness of the log: the
//! evidence must reach the newest checkpoint the witness holds, or the
//! lines after where it stops were left out.

use super::super::checkpoint::Checkpoint;
use super::super::split_line;
use super::{Evidence, EvidenceProblem};

impl Evidence {
    /// Checks the evidence's end against the newest checkpoint a witness
    /// holds (its line's chain value and the checkpoint, signed with the
    /// key): the evidence must reach it. A witness behind the evidence
    /// (it missed the newest heads) is no finding.
    pub fn witnessed(&self, chain: &str, head: &Checkpoint) -> Result<(), EvidenceProblem> {
        let why = format!("{:?}", head.why).to_lowercase();
        let parsed: Vec<Option<(String, Checkpoint)>> = self
            .files
            .iter()
            .map(|f| {
                let (content, chain) = split_line(&f.checkpoint.line)?;
                Some((chain.to_string(), serde_json::from_str(&content).ok()?))
            })
            .collect();
        if parsed.iter().flatten().any(|(c, _)| c.as_str() == chain) {
            return Ok(());
        }
        let same_file = parsed.iter().enumerate().rev().find_map(|(i, p)| {
            p.as_ref()
                .filter(|(_, cp)| cp.continues.is_some() && cp.continues == head.continues)
                .map(|(_, cp)| (i, cp))
        });
        match same_file {
            Some((i, cp)) if head.lines > cp.lines => Err(EvidenceProblem::EndsEarly {
                file: self.files[i].name.clone(),
                line: self.files[i].checkpoint.index + 1,
                lines: head.lines,
                ts: head.ts.clone(),
                why,
            }),
            Some(_) => Ok(()),
            None => Err(EvidenceProblem::WitnessBeyond {
                ts: head.ts.clone(),
                why,
            }),
        }
    }
}
