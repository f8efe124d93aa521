//! `nodeward-keeper <data_dir>`: the parent of every task of one nodeward data directory, so that
//! tasks outlive the agent (docs/live-restore.md). The agent starts it; nobody else needs to.
//! Everything is in `nodeward::driver::process::keeper::serve`; this binary links nothing else
//! of the agent (no gRPC, no HCL, no HTTP: `scripts/check-keeper.sh` checks it).

fn main() {
    let code = nodeward::driver::process::keeper::serve::main(std::env::args_os().collect());
    std::process::exit(code);
}
