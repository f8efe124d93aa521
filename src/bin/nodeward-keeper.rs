//! `nodeward-keeper <data_dir>`: the parent of every task of one nodeward data directory, so that
//! tasks outlive the agent (docs/live-restore.md). The agent starts it; nobody else needs to.
//! Everything is in the crate `nodeward_keeper` (`src/keeper/`); this binary links nothing of the
//! agent's library (no gRPC, no HCL, no HTTP: `scripts/check-keeper.sh` checks it).

fn main() {
    let code = nodeward_keeper::daemon::main(std::env::args_os().collect());
    std::process::exit(code);
}
