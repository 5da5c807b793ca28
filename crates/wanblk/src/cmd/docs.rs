//! `wanblk completions SHELL` and `wanblk man`: shell completions and man
//! pages generated from the command line definition itself, so they
//! never drift from it (docs/man/ holds the generated pages; a test checks
//! they are current).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Arguments of `wanblk completions`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  wanblk completions bash > /etc/bash_completion.d/wanblk
  wanblk completions zsh > \"${fpath[1]}/_wanblk\"
  wanblk completions fish > ~/.config/fish/completions/wanblk.fish")]
pub(crate) struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

/// Arguments of `wanblk man`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  wanblk man | man -l -
  wanblk man --dir /usr/local/share/man/man1   # wanblk.1, wanblk-copy.1, ...")]
pub(crate) struct ManArgs {
    /// Write wanblk.1 and one page per subcommand (wanblk-copy.1, ...) into
    /// this directory instead of printing wanblk.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script.
///
/// # Errors
/// Writing to stdout fails.
pub(crate) fn completions(args: CompletionsArgs, cmd: &mut clap::Command) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, cmd, "wanblk", &mut out);
    out.flush()?;
    Ok(())
}

/// Renders one page.
fn render(cmd: clap::Command) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut buf)?;
    Ok(buf)
}

/// Writes the page of `cmd` (named `name`) and of each subcommand into `dir`.
fn write_pages(cmd: &clap::Command, name: &str, dir: &Path) -> anyhow::Result<()> {
    // clap takes `&'static str` names; this runs once per page, then exits.
    let page_name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let page = cmd.clone().name(page_name).bin_name(name.replace('-', " "));
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, render(page)?).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(())
}

/// Prints wanblk.1, or writes every page into `--dir`.
///
/// # Errors
/// Rendering or writing fails.
pub(crate) fn man(args: ManArgs, mut cmd: clap::Command) -> anyhow::Result<()> {
    cmd.build();
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            write_pages(&cmd, "wanblk", &dir)
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&render(cmd)?)?;
            out.flush()?;
            Ok(())
        }
    }
}
