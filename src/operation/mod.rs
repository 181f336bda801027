//! The one operation driver: every command that changes a system (device
//! add, replace and remove, convert, reclaim, scrub, nocow --migrate,
//! rescue) is an [`Operation`] — its plan and result, its refusals as
//! values, its question — and [`run`] sequences it the same way for all:
//!
//! root check → plan → its record → verdict (refused, nothing to do, stop)
//! → the plan shown → dry run → confirm → the held path checked again →
//! stdout checked ([`Ui::before_change`]) → signals delivered to the
//! operation → execute → verify → the result said, its exit status.
//!
//! What a command renders (its plan and result as text) stays in the CLI
//! behind a [`View`]; everything else is here, once. The shared knowledge
//! of the filesystem acted on is [`state`]; the test hooks' pause points
//! are [`hooks`].

pub mod hooks;
pub mod layout;
pub mod reason;
pub mod state;

use crate::error::{Error, ErrorKind, Result};
use crate::report::envelope::{Document, Enveloped};
use crate::sys::kernel::signals::{self, OperationSignals};
use crate::ui::{self, Ui};

macro_rules! nothing_done {
    () => {
        "nothing was done"
    };
}

/// What a dry run (or a plan shown instead of acted on) says it did: the
/// one place the words are written.
pub const NOTHING_DONE: &str = nothing_done!();

/// The line a dry run ends with.
pub const DRY_RUN: &str = concat!("(dry run: ", nothing_done!(), ")\n");

/// `--dry-run` and `--yes`: how far a changing command goes without asking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Confirm {
    /// Show the plan and do nothing.
    pub dry_run: bool,
    /// Do not ask.
    pub yes: bool,
}

/// What a plan allows, decided by the operation from the plan alone.
#[derive(Debug)]
pub enum Verdict {
    /// Go on: show the plan, ask, act.
    Go,
    /// Nothing to change: the plan is shown, then `message`; status 0.
    NothingToDo(String),
    /// What was asked for is there already (a re-run after it was done):
    /// `message` alone, not the plan; status 0.
    AlreadyDone(String),
    /// A rule refuses the plan: its record goes out, its text does not;
    /// the error is the command's (exit status by its kind).
    Refused(Error),
    /// Nothing can be done, and that is the news: the plan is shown, then
    /// a warning with what to do; the run ends with `status`.
    Stop {
        /// What cannot be done.
        warning: String,
        /// What to do about it.
        hint: String,
        /// The exit status (from the registry in `model::exit`).
        status: u8,
    },
}

/// How a plan's record goes out with `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanShape {
    /// A JSON Lines record, always, before anything else (the default).
    Record,
    /// The run's one document (pretty), only when the run ends at the plan
    /// (refused, nothing to do, dry run); a run that acts sends its result
    /// record instead.
    Document,
}

/// One changing job, as the driver sees it.
pub trait Operation {
    /// What it will do (shown before the confirmation, and as a record).
    type Plan;
    /// What it did.
    type Result;
    /// Its JSON Lines record (one type per command, tagged by `event`).
    type Record: Document;

    /// Said when the user is not root ("reclaiming space needs root").
    fn needs_root(&self) -> &'static str;
    /// The plan itself refuses a run without root (with its other reasons,
    /// in its record): the driver does not check first.
    fn root_in_plan(&self) -> bool {
        false
    }
    /// How the plan's record goes out.
    fn plan_shape(&self) -> PlanShape {
        PlanShape::Record
    }
    /// Reads what it acts on (held open from here on) and plans.
    fn plan(&mut self, ui: &dyn Ui) -> Result<Self::Plan>;
    /// The plan's record (`{"event":"plan",...}`).
    fn plan_record(&self, plan: &Self::Plan) -> Self::Record;
    /// Whether the plan may go ahead.
    fn verdict(&self, _plan: &Self::Plan) -> Verdict {
        Verdict::Go
    }
    /// A refusal shows the plan first, when the plan is why (scrub's "no
    /// device to scrub": every device is missing or done).
    fn refusal_shows_plan(&self) -> bool {
        false
    }
    /// The confirmation's question.
    fn question(&self, plan: &Self::Plan) -> String;
    /// Whether to ask at all (no: the plan follows a job already running).
    fn ask(&self, _plan: &Self::Plan) -> bool {
        true
    }
    /// Name of the test hooks' pause point right after the confirmation
    /// (`convert-confirmed`), if it has one.
    fn confirmed_pause(&self) -> Option<&'static str> {
        None
    }
    /// After the confirmation: the path the user named still leads to what
    /// was planned on (or the user confirmed something else).
    fn recheck(&self) -> Result<()>;
    /// The command that shows what was done, for the error that says the
    /// change was made but its report could not be written.
    fn look(&self, plan: &Self::Plan) -> String;
    /// Runs in the background, if asked: `Some(status)` in the process the
    /// user started (it is done), `None` to go on in this one.
    fn detach(&mut self, _plan: &Self::Plan, _ui: &dyn Ui) -> Result<Option<u8>> {
        Ok(None)
    }
    /// Does it. Signals from here on are delivered through `signals`: the
    /// job stops at its next safe point and says so in its result.
    fn execute(
        &mut self,
        plan: &Self::Plan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Self::Result>;
    /// After the job: checks and remembers what it did (warnings through
    /// `ui`; an error here is the run's error).
    fn verify(&mut self, _plan: &Self::Plan, _result: &Self::Result, _ui: &dyn Ui) -> Result<()> {
        Ok(())
    }
    /// The result's record, when the job did not send it itself.
    fn result_record(&self, _result: &Self::Result) -> Option<Self::Record> {
        None
    }
    /// The exit status the result stands for.
    fn status(&self, result: &Self::Result) -> u8;

    // h-convert (issue 50): a run that ends at the plan with a document of
    // its own.
    /// What was asked for is there already, and the operation said so
    /// through `ui` in a document of its own (not the plan's: `device add`
    /// of devices that are members): `true` ends the run there, before the
    /// plan's record, with status 0.
    fn said_already_done(&self, _plan: &Self::Plan, _ui: &dyn Ui) -> bool {
        false
    }

    // A command whose one document is its result (nocow, rescue --copy-to;
    // issue 50): where its plan goes, and its dry run's words.
    /// Where the plan goes when the run goes on past it.
    fn plan_shown(&self) -> PlanShown {
        PlanShown::Stdout
    }
    /// The line a dry run ends with.
    fn dry_run_line(&self) -> &'static str {
        DRY_RUN
    }
}

/// [`View::plan_end`], when there is one.
fn say_end<O: Operation>(ui: &dyn Ui, view: &dyn View<O>, plan: &O::Plan) {
    let end = view.plan_end(plan);
    if !end.is_empty() {
        ui.status(&end);
    }
}

/// Where a plan goes when the run goes on past it (a run that ends at its
/// plan always says it on stdout, as its story or its document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanShown {
    /// On stdout, as the run's story, before anything else (the default).
    Stdout,
    /// On stderr, for the person who answers the question (left out with
    /// `--json --yes`: nobody is asked, and the result's document holds
    /// the plan); [`View::plan_asked`].
    Stderr,
    /// Not at all (the run's document says everything).
    Not,
}

/// How a command's plan and result read as text (the CLI's part).
pub trait View<O: Operation + ?Sized> {
    /// The plan, as shown before the question.
    fn plan(&self, plan: &O::Plan) -> String;
    /// Says the result (text, warnings) to the person; nothing to return.
    fn result(&self, plan: &O::Plan, result: &O::Result);

    // A command whose one document is its result (see [`PlanShown`]).
    /// The plan as shown on stderr before the question ([`PlanShown::Stderr`]).
    fn plan_asked(&self, plan: &O::Plan) -> String {
        self.plan(plan)
    }
    /// Text after a plan the run ends at (nothing to do, dry run): `nocow
    /// --for`'s advice.
    fn plan_end(&self, _plan: &O::Plan) -> String {
        String::new()
    }
}

/// The refusal of a changing command run without root.
pub fn need_root(what: &str) -> Result<()> {
    if crate::sys::is_root() {
        return Ok(());
    }
    Err(Error::new(ErrorKind::Permission, what).with_hint("run it as root, e.g. with sudo"))
}

/// Runs `op` from plan to result (see the module's text); returns the exit
/// status.
pub fn run<O: Operation>(
    op: &mut O,
    confirm: Confirm,
    ui: &dyn Ui,
    view: &dyn View<O>,
) -> Result<u8> {
    if !op.root_in_plan() {
        need_root(op.needs_root())?;
    }
    let plan = op.plan(ui)?;
    if op.said_already_done(&plan, ui) {
        return Ok(crate::error::exit::OK);
    }
    let record = op.plan_record(&plan);
    let document = op.plan_shape() == PlanShape::Document;
    if !document {
        ui::emit(ui, &record);
    }
    let verdict = op.verdict(&plan);
    let ends_here = confirm.dry_run || !matches!(verdict, Verdict::Go);
    if document && ends_here {
        ui.event_line(serde_json::to_string_pretty(&Enveloped::new(&record)));
    }
    let shown = match &verdict {
        Verdict::Refused(_) => op.refusal_shows_plan(),
        Verdict::AlreadyDone(_) => false,
        _ => true,
    };
    if shown && (ends_here || op.plan_shown() == PlanShown::Stdout) {
        ui.status(&view.plan(&plan));
    }
    match verdict {
        Verdict::Go => {}
        Verdict::Refused(e) => return Err(e),
        Verdict::NothingToDo(message) | Verdict::AlreadyDone(message) => {
            ui.status(&message);
            say_end(ui, view, &plan);
            return Ok(crate::error::exit::OK);
        }
        Verdict::Stop {
            warning,
            hint,
            status,
        } => {
            ui.warn(&warning, &hint);
            return Ok(status);
        }
    }
    if confirm.dry_run {
        ui.status(op.dry_run_line());
        say_end(ui, view, &plan);
        return Ok(crate::error::exit::OK);
    }
    if op.plan_shown() == PlanShown::Stderr && !(ui.json() && confirm.yes) {
        ui.say(&view.plan_asked(&plan));
    }
    if op.ask(&plan) {
        ui.confirm(&op.question(&plan), confirm.yes)?;
    }
    if let Some(point) = op.confirmed_pause() {
        hooks::pause_point(point);
    }
    op.recheck()?;
    ui.before_change(&op.look(&plan))?;
    if let Some(status) = op.detach(&plan, ui)? {
        return Ok(status);
    }
    let signals = signals::begin_operation()?;
    let result = op.execute(&plan, &signals, ui)?;
    op.verify(&plan, &result, ui)?;
    if let Some(record) = op.result_record(&result) {
        ui::emit(ui, &record);
    }
    view.result(&plan, &result);
    Ok(op.status(&result))
}

#[cfg(test)]
mod plan_shown_tests {
    //! [`PlanShown`], [`Operation::dry_run_line`], [`View::plan_asked`] and
    //! [`View::plan_end`]: a command whose one document is its result.

    use super::*;
    use crate::ui::{RecordingUi, Said};

    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Rec;

    impl Document for Rec {
        const NAME: &'static str = "test";
    }

    struct Op(PlanShown);

    impl Operation for Op {
        type Plan = ();
        type Result = ();
        type Record = Rec;
        fn needs_root(&self) -> &'static str {
            "never asked"
        }
        fn root_in_plan(&self) -> bool {
            true
        }
        fn plan_shape(&self) -> PlanShape {
            PlanShape::Document
        }
        fn plan(&mut self, _ui: &dyn Ui) -> Result<()> {
            Ok(())
        }
        fn plan_record(&self, _plan: &()) -> Rec {
            Rec
        }
        fn question(&self, _plan: &()) -> String {
            "Go?".into()
        }
        fn recheck(&self) -> Result<()> {
            Ok(())
        }
        fn look(&self, _plan: &()) -> String {
            String::new()
        }
        fn execute(&mut self, _: &(), _: &OperationSignals, _: &dyn Ui) -> Result<()> {
            unreachable!("the tests end before the change")
        }
        fn status(&self, _result: &()) -> u8 {
            0
        }
        fn plan_shown(&self) -> PlanShown {
            self.0
        }
        fn dry_run_line(&self) -> &'static str {
            "(dry run: nothing was changed)\n"
        }
    }

    struct Text;

    impl View<Op> for Text {
        fn plan(&self, _plan: &()) -> String {
            "plan\n".into()
        }
        fn result(&self, _plan: &(), _result: &()) {}
        fn plan_asked(&self, _plan: &()) -> String {
            "plan on stderr\n".into()
        }
        fn plan_end(&self, _plan: &()) -> String {
            "advice\n".into()
        }
    }

    #[test]
    fn a_plan_for_the_person_who_answers_goes_to_stderr_only() {
        let ui = RecordingUi::new();
        let confirm = Confirm::default();
        let refused = run(&mut Op(PlanShown::Stderr), confirm, &ui, &Text).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Refused);
        assert_eq!(
            ui.said(),
            vec![
                Said::Say("plan on stderr\n".into()),
                Said::Confirm("Go?".into(), false),
            ]
        );
        let ui = RecordingUi::new();
        let _ = run(&mut Op(PlanShown::Not), confirm, &ui, &Text);
        assert_eq!(ui.said(), vec![Said::Confirm("Go?".into(), false)]);
    }

    #[test]
    fn a_dry_run_ends_with_its_own_line_then_the_plans_end() {
        let ui = RecordingUi::new();
        let confirm = Confirm {
            dry_run: true,
            yes: false,
        };
        let status = run(&mut Op(PlanShown::Stderr), confirm, &ui, &Text).unwrap();
        assert_eq!(status, crate::error::exit::OK);
        let said = ui.said();
        let statuses: Vec<&Said> = said
            .iter()
            .filter(|s| matches!(s, Said::Status(_)))
            .collect();
        assert_eq!(
            statuses,
            vec![
                &Said::Status("plan\n".into()),
                &Said::Status("(dry run: nothing was changed)\n".into()),
                &Said::Status("advice\n".into()),
            ]
        );
        assert!(!said.iter().any(|s| matches!(s, Said::Say(_))), "{said:?}");
    }
}
