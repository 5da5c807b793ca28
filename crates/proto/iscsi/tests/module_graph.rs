//! The files of this crate import each other without a cycle (a circle
//! between error.rs and pdu.rs was broken by moving `Opcode` to opcode.rs).

#[path = "../../shared-tests/module_graph.rs"]
mod graph;

#[test]
fn the_checker_finds_a_cycle_and_only_that() {
    graph::self_test();
}

#[test]
fn no_cycles_between_files() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles = graph::cycles(&src);
    assert!(cycles.is_empty(), "cycles: {cycles:?}\n{}", graph::describe(&src));
}
