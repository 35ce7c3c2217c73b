//! GPU tests of the device-side decode loop (ignored without a GPU): one launch of the loop
//! gives exactly the tokens of the same number of step-graph replays, stops a row at the
//! end-of-sequence id, runs again with other step counts, and its graph (the WHILE node and
//! its captured body) is hazard-free, with and without programmatic dependent launch.
//!
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_device_loop -- --ignored --test-threads=1`

mod common;

use graphsmith::model::NodeKind;
use graphsmith::Context;
use graphsmith_llama::{random_weights, Config, DecoderOptions, Mode, Model, Pdl};

fn noop(_: usize, _: usize) {}

/// The tokens of `steps` step-graph replays for `batch` rows, read after each step.
fn host_launched(model: &mut Model, batch: usize, steps: usize) -> Vec<Vec<i32>> {
    let mut out = vec![Vec::new(); batch];
    for _ in 0..steps {
        model.run_free(batch, 1).unwrap();
        for (r, t) in model.next_tokens(batch).unwrap().into_iter().enumerate() {
            out[r].push(t);
        }
    }
    out
}

/// A prompt the tiny model (seed 11) decodes from without settling on one token at once.
const PROMPT: [i32; 6] = [3, 141, 59, 26, 5, 358];

/// Prefill: row r reads the prompt rotated by r, ending at position `len - 1`.
fn prefill(model: &mut Model, batch: usize, len: usize) {
    for t in 0..len {
        let rows: Vec<(i32, i32)> = (0..batch)
            .map(|r| (PROMPT[(t + r) % PROMPT.len()], t as i32))
            .collect();
        model.step(&rows).unwrap();
    }
}

fn loop_matches_host_launches(pdl: Pdl) {
    let ctx = Context::new(0).unwrap();
    let c = Config::named("tiny").unwrap();
    let w = random_weights(&c, 11);
    let options = DecoderOptions {
        pdl,
        ..DecoderOptions::default()
    };
    let mut model = Model::new(&ctx, c.clone(), &w, (4, 200), Mode::Graphs, options, noop).unwrap();
    for (batch, steps) in [(1usize, 16usize), (3, 40)] {
        prefill(&mut model, batch, 6);
        let want = host_launched(&mut model, batch, steps);
        prefill(&mut model, batch, 6);
        let got = model.decode_loop(batch, steps, None).unwrap();
        assert_eq!(got.steps, steps, "{pdl:?} batch {batch}: steps run");
        assert_eq!(
            got.tokens, want,
            "{pdl:?} batch {batch}: the loop's tokens against {steps} replays of the step graph"
        );
        // Rows read different prompts: together they must not be one repeated token (the
        // tiny random model may repeat one token within a row).
        let distinct: std::collections::HashSet<_> = want.iter().flatten().collect();
        assert!(
            batch == 1 || distinct.len() > 1,
            "a degenerate decode: {want:?}"
        );

        // The end-of-sequence id: row 0 stops right after producing it; with one row, so
        // does the loop.
        let stop_at = steps / 2;
        let eos = want[0][stop_at];
        let first = want[0].iter().position(|&t| t == eos).unwrap();
        prefill(&mut model, batch, 6);
        let stopped = model.decode_loop(batch, steps, Some(eos)).unwrap();
        assert_eq!(
            stopped.tokens[0],
            want[0][..=first],
            "{pdl:?} batch {batch}: row 0 stops at the end-of-sequence id {eos}"
        );
        if batch == 1 {
            assert_eq!(
                stopped.steps,
                first + 1,
                "{pdl:?}: the loop ends with its row"
            );
        }
        for (r, row) in want.iter().enumerate().skip(1) {
            let expect = match row.iter().position(|&t| t == eos) {
                Some(e) => &row[..=e],
                None => &row[..],
            };
            assert_eq!(stopped.tokens[r], expect, "{pdl:?} batch {batch} row {r}");
        }
        // Going on after the end id: a row that stopped reports nothing; the others decode on
        // (unless they stopped too).
        let stopped_rows: Vec<bool> = stopped
            .tokens
            .iter()
            .map(|t| t.last() == Some(&eos))
            .collect();
        let more = model.decode_loop(batch, 4, Some(eos)).unwrap();
        for (r, was_stopped) in stopped_rows.iter().enumerate() {
            if *was_stopped {
                assert!(
                    more.tokens[r].is_empty(),
                    "{pdl:?} batch {batch} row {r}: a stopped row reports {:?}",
                    more.tokens[r]
                );
            } else {
                assert!(!more.tokens[r].is_empty(), "{pdl:?} batch {batch} row {r}");
            }
        }
        println!(
            "{pdl:?} batch {batch}: {steps} steps match; end id {eos} stops row 0 after {} tokens",
            first + 1
        );
    }
    // The loop's graph: one WHILE node whose body holds the step, ending in the loop's own
    // advance, as many nodes as the step graph, free of hazards.
    let held = model.held_loop(1).expect("the bucket-1 loop is kept");
    let m = held.exec().model();
    assert_eq!(m.nodes.len(), 1, "one WHILE node");
    let NodeKind::Conditional { body_graphs, .. } = &m.nodes[0].kind else {
        panic!("not a conditional node: {:?}", m.nodes[0].kind);
    };
    let body = &body_graphs[0];
    assert!(body.nodes.iter().any(|n| n.label == "loop advance"));
    assert!(!body.nodes.iter().any(|n| n.label == "advance"));
    assert!(body.nodes.len() > 5, "the step's kernels are in the body");
    let step_nodes = model
        .node_count(1)
        .expect("the bucket-1 step graph is held");
    assert_eq!(
        body.nodes.len(),
        step_nodes,
        "an iteration has a step's nodes"
    );
    let report = m.hazards().unwrap();
    assert!(report.hazards.is_empty(), "{pdl:?}: {report:?}");
    assert_eq!(held.uses_pdl(), model.uses_pdl());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_loop_decodes_like_host_launches_without_pdl() {
    loop_matches_host_launches(Pdl::Off);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_loop_decodes_like_host_launches_with_pdl() {
    loop_matches_host_launches(Pdl::Auto);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_loop_refuses_eager_mode_and_bad_requests() {
    let ctx = Context::new(0).unwrap();
    let c = Config::named("tiny").unwrap();
    let w = random_weights(&c, 5);
    let mut eager = common::model(&ctx, &c, &w, (1, 64), Mode::Eager);
    let e = eager.decode_loop(1, 4, None).unwrap_err().to_string();
    assert!(e.contains("graphs mode"), "{e}");
    let mut graphs = common::model(&ctx, &c, &w, (1, 64), Mode::Graphs);
    let e = graphs.decode_loop(0, 4, None).unwrap_err().to_string();
    assert!(e.contains("0 rows"), "{e}");
    let e = graphs.decode_loop(65, 4, None).unwrap_err().to_string();
    assert!(e.contains("made for at most 1"), "{e}");
    let e = graphs.decode_loop(1, 0, None).unwrap_err().to_string();
    assert!(e.contains("0 steps"), "{e}");
}
