fn main() -> std::process::ExitCode {
    cdc_connector::cli::main()
}
