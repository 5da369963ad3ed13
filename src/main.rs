//! `campaign-sender`: see the library ([`campaign_sender`]) for everything it does.

fn main() -> std::process::ExitCode {
    campaign_sender::cli::main()
}
