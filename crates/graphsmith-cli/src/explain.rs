//! `graphsmith explain <code|name|id>`: the failure catalogue's entries (docs/failures.md) for a
//! CUDA error code (`900`), its driver or runtime name (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`,
//! `cudaErrorStreamCaptureUnsupported`) or an entry id. Needs no GPU. The lookup and the text
//! live in `graphsmith::catalogue`; this prints them.

use std::process::ExitCode;

/// Prints the entries for `query` (text, or JSON with `json`). Exit status 0 when something
/// matched, 2 for input the catalogue does not know, 1 if the JSON cannot be written.
pub fn run(query: &str, json: bool) -> ExitCode {
    let found = match graphsmith::catalogue::explain(query) {
        Ok(found) => found,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&found) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{found}");
        println!();
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::run;
    use std::process::ExitCode;

    #[test]
    fn known_codes_and_names_succeed_unknown_input_exits_2() {
        for q in [
            "900",
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            "cudaErrorStreamCaptureUnsupported",
            "unjoined-fork",
        ] {
            assert_eq!(run(q, false), ExitCode::SUCCESS, "{q}");
            assert_eq!(run(q, true), ExitCode::SUCCESS, "{q}");
        }
        for q in ["", "42", "CUDA_ERROR_NOPE"] {
            assert_eq!(run(q, false), ExitCode::from(2), "{q}");
        }
    }
}
