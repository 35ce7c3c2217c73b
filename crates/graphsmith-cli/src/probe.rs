//! `graphsmith probe`.

use std::process::ExitCode;

pub fn run(device: usize, json: bool) -> ExitCode {
    match graphsmith::probe::probe(device) {
        Ok(p) if json => match serde_json::to_string_pretty(&p) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: could not write JSON: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(p) => {
            print!("{p}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::report(&e);
            ExitCode::FAILURE
        }
    }
}
