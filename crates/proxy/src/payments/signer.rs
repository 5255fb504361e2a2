//! The seam to the operator's wallet: an x402 payment is signed by a
//! command the operator names (`payment.x402_signer`). It gets the accepted
//! requirement as JSON on stdin (`{"x402Version", "resource", "accepted"}`)
//! and prints the `PAYMENT-SIGNATURE` value (base64 of x402's
//! `PaymentPayload`) on stdout. mannerly holds no key and knows no chain:
//! whatever signs (a local wallet, a remote service behind a small
//! script) is the operator's choice, and without it nothing is paid.

use std::process::Stdio;
use std::time::Duration;

use http::HeaderValue;
use mannerly_policy::payment::PaymentParams;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;

/// A signature longer than this is not a header value a site would take.
const MAX_SIGNATURE: usize = 16 * 1024;

/// The configured payment signer.
#[derive(Clone, Debug)]
pub(crate) struct X402Signer {
    program: String,
    args: Vec<String>,
    timeout: Duration,
}

impl X402Signer {
    /// The signer `payment.x402_signer` names, if any.
    pub(crate) fn from_params(p: &PaymentParams) -> Option<X402Signer> {
        let (program, args) = p.x402_signer.split_first()?;
        Some(X402Signer {
            program: program.clone(),
            args: args.to_vec(),
            timeout: Duration::from_secs(p.x402_signer_timeout_secs.max(1)),
        })
    }

    /// Runs the signer on `input`; the header value it printed, or why not.
    pub(crate) async fn sign(&self, input: &str) -> Result<HeaderValue, String> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("payment signer {:?} cannot be started: {e}", self.program))?;
        let run = async {
            if let Some(mut stdin) = child.stdin.take() {
                // A signer that exits without reading is judged by its exit.
                let _ = stdin.write_all(input.as_bytes()).await;
            }
            let mut out = Vec::new();
            if let Some(stdout) = child.stdout.take() {
                stdout
                    .take(MAX_SIGNATURE as u64 + 1)
                    .read_to_end(&mut out)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let mut err = Vec::new();
            if let Some(stderr) = child.stderr.take() {
                let _ = stderr.take(1024).read_to_end(&mut err).await;
            }
            let status = child.wait().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, out, err))
        };
        let (status, out, err) = tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| format!("payment signer gave no answer within {:?}", self.timeout))??;
        if !status.success() {
            let said = String::from_utf8_lossy(&err);
            return Err(format!("payment signer failed ({status}): {}", said.trim()));
        }
        if out.len() > MAX_SIGNATURE {
            return Err(format!(
                "payment signer printed more than {MAX_SIGNATURE} bytes"
            ));
        }
        let text = String::from_utf8_lossy(&out);
        let value = text.trim();
        if value.is_empty() {
            return Err("payment signer printed nothing".into());
        }
        HeaderValue::from_str(value)
            .map_err(|_| "payment signer printed what is not a header value".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in wallet: a shell that answers with what it was given
    /// (base64 of stdin), so the test sees the requirement reached it.
    fn shell(script: &str) -> X402Signer {
        X402Signer {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            timeout: Duration::from_secs(20),
        }
    }

    #[tokio::test]
    async fn the_signer_gets_the_requirement_and_its_answer_is_the_header() {
        let s = shell("base64 -w0");
        let v = s.sign(r#"{"x402Version":2}"#).await.unwrap();
        assert_eq!(v, "eyJ4NDAyVmVyc2lvbiI6Mn0=");
    }

    #[tokio::test]
    async fn a_signer_that_fails_or_says_nothing_pays_nothing() {
        let e = shell("echo no funds >&2; exit 3")
            .sign("{}")
            .await
            .unwrap_err();
        assert_eq!(e, "payment signer failed (exit status: 3): no funds");
        let e = shell("cat >/dev/null").sign("{}").await.unwrap_err();
        assert_eq!(e, "payment signer printed nothing");
        let e = shell("printf 'a\\001b'").sign("{}").await.unwrap_err();
        assert_eq!(e, "payment signer printed what is not a header value");
        let mut slow = shell("sleep 30");
        slow.timeout = Duration::from_millis(200);
        let e = slow.sign("{}").await.unwrap_err();
        assert_eq!(e, "payment signer gave no answer within 200ms");
        let missing = X402Signer {
            program: "/nonexistent/signer".into(),
            args: vec![],
            timeout: Duration::from_secs(1),
        };
        assert!(missing
            .sign("{}")
            .await
            .unwrap_err()
            .starts_with("payment signer \"/nonexistent/signer\" cannot be started"));
    }
}
