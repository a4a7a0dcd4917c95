//! Entry point: everything lives in the library (`cli`), so tests and tools can reuse it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    boot_image_controller::cli::main()
}
