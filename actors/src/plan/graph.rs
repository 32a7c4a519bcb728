//! When a plan's steps may run: which are ready now, which can no longer run because a step
//! they need ended without completing, whether proposed dependencies form a graph the
//! planner can run, and how a revision replaces the part of a plan that has not completed.
//!
//! One rule decides the order. A plan none of whose live steps names dependencies is
//! *sequential*: one step at a time, in order, each after the one before it has ended,
//! however it ended (OpenManus' PlanningFlow, and a plan read from text). A plan whose steps
//! name them is a *graph*: a step is ready once every step it needs has completed, any
//! number run at once, and a step that needs one which ended any other way is blocked.

use super::{Needs, Plan, PlanStep, StepStatus};

/// What a revision did: the new steps' numbers, and the steps it replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct Revised {
    pub added: std::ops::Range<usize>,
    pub replaced: Vec<usize>,
}

impl Plan {
    /// Whether any live step names its dependencies.
    pub fn is_graph(&self) -> bool {
        self.live().any(|(_, s)| s.depends_on.is_some())
    }

    /// The steps that may start now and have not: in a sequential plan the first live step
    /// that has not ended, unless one is running; in a graph every live step not started
    /// whose dependencies have all completed, in number order.
    pub fn ready(&self) -> Vec<usize> {
        if !self.is_graph() {
            return match self.live().find(|(_, s)| !s.status.is_final()) {
                Some((i, s)) if s.status == StepStatus::NotStarted => vec![i],
                _ => vec![],
            };
        }
        self.live()
            .filter(|(_, s)| s.status == StepStatus::NotStarted)
            .filter(|(_, s)| {
                s.depends_on.iter().flatten().all(|&d| {
                    self.steps
                        .get(d)
                        .is_some_and(|d| d.status == StepStatus::Completed)
                })
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Mark `blocked` every live step not started that needs a step which ended without
    /// completing, directly or through other blocked steps; each with the step that stops
    /// it. Only graphs block: a sequential plan goes on after a failure.
    pub fn block_dependents(&mut self) -> Vec<(usize, usize)> {
        let mut blocked = vec![];
        if !self.is_graph() {
            return blocked;
        }
        loop {
            let next = self.live().find_map(|(i, s)| {
                if s.status != StepStatus::NotStarted {
                    return None;
                }
                let ended_badly = |&&d: &&usize| {
                    self.steps
                        .get(d)
                        .is_some_and(|d| d.status.is_final() && d.status != StepStatus::Completed)
                };
                s.depends_on
                    .iter()
                    .flatten()
                    .find(ended_badly)
                    .map(|&d| (i, d))
            });
            let Some((i, d)) = next else {
                return blocked;
            };
            let why = self.steps[d].status.as_str();
            let step = &mut self.steps[i];
            step.status = StepStatus::Blocked;
            step.notes = format!("not run: step {d}, which it needs, ended {why}");
            blocked.push((i, d));
        }
    }

    /// The live steps in the order to show them, each with its depth: a sequential plan
    /// flat, in order; a graph as a forest, each step under the highest-numbered step it
    /// needs (the others it needs are in its `depends_on`), siblings in number order.
    pub fn outline(&self) -> Vec<(usize, usize)> {
        if !self.is_graph() {
            return self.live().map(|(i, _)| (i, 0)).collect();
        }
        let parent = |s: &PlanStep| {
            s.depends_on
                .iter()
                .flatten()
                .copied()
                .filter(|&d| self.steps.get(d).is_some_and(PlanStep::is_live))
                .max()
        };
        let mut children: Vec<Vec<usize>> = vec![vec![]; self.steps.len()];
        let mut roots = vec![];
        for (i, s) in self.live() {
            match parent(s) {
                Some(p) if p != i => children[p].push(i),
                _ => roots.push(i),
            }
        }
        let mut out = Vec::with_capacity(self.steps.len());
        let mut todo: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
        while let Some((i, depth)) = todo.pop() {
            if out.iter().any(|&(j, _)| j == i) {
                continue;
            }
            out.push((i, depth));
            todo.extend(children[i].iter().rev().map(|&c| (c, depth + 1)));
        }
        out
    }

    /// The live steps that ended without completing.
    pub fn unfinished(&self) -> Vec<usize> {
        self.live()
            .filter(|(_, s)| s.status.is_final() && s.status != StepStatus::Completed)
            .map(|(i, _)| i)
            .collect()
    }

    /// The live steps a revision replaces: every one that has neither completed nor is
    /// running or waiting for approval.
    pub fn replaceable(&self) -> Vec<usize> {
        self.live()
            .filter(|(_, s)| !matches!(s.status, StepStatus::Completed) && !s.status.is_active())
            .map(|(i, _)| i)
            .collect()
    }

    /// Take `steps` (text, and the numbers of the steps each needs) in place of the steps
    /// `replace` names (from `replaceable`, as the model was shown the plan; a step that
    /// ended badly since stays, for the flow to settle). The new steps are numbered from
    /// the plan's current length; they may need the steps that stay and each other. A new
    /// step that names no dependencies in a plan that is, or becomes, a graph needs the
    /// new step before it (the first one: the steps still running or waiting), so an
    /// unannotated list stays in order. Refused, with nothing changed, if the dependencies
    /// do not form a graph over those steps.
    pub fn revise(
        &mut self,
        steps: Vec<(String, Needs)>,
        replace: &[usize],
    ) -> Result<Revised, String> {
        if steps.is_empty() {
            return Err("a revision needs at least one step".into());
        }
        let first = self.steps.len();
        let kept = |n: usize| -> Result<(), String> {
            match self.steps.get(n) {
                Some(s) if !s.is_live() => Err(format!(
                    "step {n} was replaced in revision {}; name the step that took its place",
                    s.replaced_in.unwrap_or_default()
                )),
                Some(s) if replace.contains(&n) => Err(format!(
                    "step {n} ({}) is being replaced by this revision; name a new step instead",
                    s.status.as_str()
                )),
                Some(_) => Ok(()),
                None => Err(format!("there is no step {n}")),
            }
        };
        let deps: Vec<Needs> = steps.iter().map(|(_, d)| d.clone()).collect();
        check_dependencies(first, &deps, kept)?;
        let graph = self.is_graph() || deps.iter().any(Option::is_some);
        let running: Vec<usize> = self
            .live()
            .filter(|(_, s)| s.status.is_active())
            .map(|(i, _)| i)
            .collect();
        self.revision += 1;
        let mut replaced = vec![];
        for &i in replace {
            if let Some(s) = self.steps.get_mut(i).filter(|s| s.is_live()) {
                s.replaced_in = Some(self.revision);
                replaced.push(i);
            }
        }
        for (k, (text, depends_on)) in steps.into_iter().enumerate() {
            let mut step = PlanStep::new(text);
            step.depends_on = match depends_on {
                Some(d) => Some(d),
                None if !graph => None,
                None if k == 0 => Some(running.clone()),
                None => Some(vec![first + k - 1]),
            };
            self.steps.push(step);
        }
        Ok(Revised {
            added: first..self.steps.len(),
            replaced,
        })
    }

    /// Give a new plan's steps their dependencies (`deps[i]` for step `i`), if any names
    /// some: a step that names none then needs the step before it. Refused, with nothing
    /// changed, if they do not form a graph.
    pub fn depend(&mut self, deps: Vec<Needs>) -> Result<(), String> {
        if deps.iter().all(Option::is_none) {
            return Ok(());
        }
        let n = self.steps.len();
        if deps.len() != n {
            return Err(format!("{} dependency lists for {n} steps", deps.len()));
        }
        check_dependencies(0, &deps, |d| Err(format!("there is no step {d}")))?;
        for (i, (step, d)) in self.steps.iter_mut().zip(deps).enumerate() {
            step.depends_on = Some(d.unwrap_or_else(|| i.checked_sub(1).into_iter().collect()));
        }
        Ok(())
    }
}

/// Check that `deps` (for the steps numbered `first`, `first + 1`, …) form a graph: no step
/// needs itself, every number names one of these steps or a step before `first` that
/// `earlier` accepts, and no steps need each other in a cycle. The error says which step
/// and why, in words a model can act on.
fn check_dependencies(
    first: usize,
    deps: &[Needs],
    earlier: impl Fn(usize) -> Result<(), String>,
) -> Result<(), String> {
    let end = first + deps.len();
    for (k, d) in deps.iter().enumerate() {
        let i = first + k;
        for &n in d.iter().flatten() {
            if n == i {
                return Err(format!("step {i} depends on itself"));
            }
            if n >= end {
                return Err(format!(
                    "step {i} depends on step {n}, which does not exist (the steps are numbered \
                     {first} to {})",
                    end - 1
                ));
            }
            if n < first {
                earlier(n).map_err(|why| format!("step {i} depends on step {n}: {why}"))?;
            }
        }
    }
    // Depth-first search over the new steps; a step met again while still on the path
    // closes a cycle, which is reported as the path from it.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut marks = vec![Mark::New; deps.len()];
    let needs = |k: usize| -> Vec<usize> {
        deps[k]
            .iter()
            .flatten()
            .filter(|&&n| n >= first)
            .map(|&n| n - first)
            .collect()
    };
    for start in 0..deps.len() {
        if marks[start] != Mark::New {
            continue;
        }
        let mut path: Vec<(usize, Vec<usize>)> = vec![(start, needs(start))];
        marks[start] = Mark::OnPath;
        while let Some((at, todo)) = path.last_mut() {
            let at = *at;
            match todo.pop() {
                Some(next) if marks[next] == Mark::OnPath => {
                    let from = path.iter().position(|(k, _)| *k == next).unwrap_or(0);
                    let cycle: Vec<String> = path[from..]
                        .iter()
                        .map(|(k, _)| (first + k).to_string())
                        .chain([(first + next).to_string()])
                        .collect();
                    return Err(format!(
                        "steps {} need each other in a cycle, so none of them could start",
                        cycle.join(" → ")
                    ));
                }
                Some(next) if marks[next] == Mark::New => {
                    marks[next] = Mark::OnPath;
                    path.push((next, needs(next)));
                }
                Some(_) => {}
                None => {
                    marks[at] = Mark::Done;
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(n: usize) -> Plan {
        Plan::new("p", "T", (0..n).map(|i| format!("s{i}")).collect())
    }

    fn set(p: &mut Plan, i: usize, status: StepStatus) {
        p.steps[i].status = status;
    }

    #[test]
    fn a_plan_without_dependencies_runs_in_order_and_goes_on_after_a_failure() {
        let mut p = plan(3);
        p.depend(vec![None, None, None]).unwrap();
        assert!(!p.is_graph());
        assert_eq!(p.ready(), [0]);
        set(&mut p, 0, StepStatus::InProgress);
        assert_eq!(p.ready(), Vec::<usize>::new());
        set(&mut p, 0, StepStatus::Failed);
        assert!(p.block_dependents().is_empty());
        assert_eq!(p.ready(), [1]);
    }

    #[test]
    fn independent_steps_are_ready_together_and_a_join_waits_for_all() {
        let mut p = plan(6);
        p.depend(vec![
            Some(vec![]),
            Some(vec![0]),
            Some(vec![0]),
            Some(vec![0]),
            Some(vec![0]),
            Some(vec![1, 2, 3, 4]),
        ])
        .unwrap();
        assert_eq!(p.ready(), [0]);
        set(&mut p, 0, StepStatus::Completed);
        assert_eq!(p.ready(), [1, 2, 3, 4]);
        for i in 1..4 {
            set(&mut p, i, StepStatus::Completed);
        }
        set(&mut p, 4, StepStatus::InProgress);
        assert_eq!(p.ready(), Vec::<usize>::new());
        set(&mut p, 4, StepStatus::Completed);
        assert_eq!(p.ready(), [5]);
    }

    #[test]
    fn a_step_without_dependencies_in_a_graph_waits_for_the_one_before() {
        let mut p = plan(3);
        p.depend(vec![None, Some(vec![]), None]).unwrap();
        let deps: Vec<_> = p.steps.iter().map(|s| s.depends_on.clone()).collect();
        assert_eq!(deps, [Some(vec![]), Some(vec![]), Some(vec![1])]);
        assert_eq!(p.ready(), [0, 1]);
    }

    #[test]
    fn a_failure_blocks_what_needs_it_through_the_graph_and_nothing_else() {
        let mut p = plan(5);
        p.depend(vec![
            Some(vec![]),
            Some(vec![0]),
            Some(vec![1]),
            Some(vec![]),
            Some(vec![2, 3]),
        ])
        .unwrap();
        set(&mut p, 0, StepStatus::Failed);
        assert_eq!(p.block_dependents(), [(1, 0), (2, 1), (4, 2)]);
        assert_eq!(p.steps[2].status, StepStatus::Blocked);
        assert!(p.steps[2].notes.contains("step 1"), "{}", p.steps[2].notes);
        assert_eq!(p.ready(), [3]);
        assert_eq!(p.unfinished(), [0, 1, 2, 4]);
    }

    #[test]
    fn the_outline_puts_each_step_under_what_it_needs() {
        let mut p = plan(6);
        p.depend(vec![
            Some(vec![]),
            Some(vec![0]),
            Some(vec![0]),
            Some(vec![]),
            Some(vec![1, 2]),
            Some(vec![3]),
        ])
        .unwrap();
        assert_eq!(
            p.outline(),
            [(0, 0), (1, 1), (2, 1), (4, 2), (3, 0), (5, 1)]
        );
        assert_eq!(plan(2).outline(), [(0, 0), (1, 0)]);
    }

    #[test]
    fn bad_graphs_are_refused_with_the_reason() {
        let no_earlier = |d: usize| Err(format!("there is no step {d}"));
        let e = check_dependencies(0, &[Some(vec![0])], no_earlier).unwrap_err();
        assert_eq!(e, "step 0 depends on itself");
        let e = check_dependencies(0, &[Some(vec![]), Some(vec![7])], no_earlier).unwrap_err();
        assert!(
            e.contains("step 1 depends on step 7, which does not exist"),
            "{e}"
        );
        assert!(e.contains("numbered 0 to 1"), "{e}");
        let e = check_dependencies(
            0,
            &[Some(vec![]), Some(vec![3]), Some(vec![1]), Some(vec![2])],
            no_earlier,
        )
        .unwrap_err();
        assert!(e.contains("1 → 3 → 2 → 1"), "{e}");
        // Forward references are fine when there is no cycle.
        check_dependencies(0, &[Some(vec![1]), Some(vec![])], no_earlier).unwrap();
        let mut p = plan(2);
        assert!(p.depend(vec![Some(vec![1]), Some(vec![0])]).is_err());
        assert!(
            p.steps.iter().all(|s| s.depends_on.is_none()),
            "nothing changed"
        );
    }

    #[test]
    fn a_revision_replaces_what_did_not_complete_and_keeps_the_rest() {
        let mut p = plan(4);
        p.depend(vec![
            Some(vec![]),
            Some(vec![]),
            Some(vec![0]),
            Some(vec![1, 2]),
        ])
        .unwrap();
        set(&mut p, 0, StepStatus::Failed);
        set(&mut p, 1, StepStatus::InProgress);
        p.block_dependents();
        let before = p.clone();
        let r = p.replaceable();
        assert_eq!(r, [0, 2, 3]);
        let e = p.revise(vec![("x".into(), Some(vec![2]))], &r).unwrap_err();
        assert!(e.contains("step 2 (blocked) is being replaced"), "{e}");
        assert_eq!(p, before, "a refused revision changes nothing");
        let e = p.revise(vec![("x".into(), Some(vec![9]))], &r).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");

        let r = p
            .revise(
                vec![
                    ("a again".into(), Some(vec![])),
                    ("join".into(), Some(vec![1, 4])),
                ],
                &r,
            )
            .unwrap();
        assert_eq!(r.added, 4..6);
        assert_eq!(r.replaced, [0, 2, 3]);
        assert_eq!(p.revision, 1);
        assert_eq!(
            p.steps[0].status,
            StepStatus::Failed,
            "history stays as it was"
        );
        assert_eq!(p.steps[0].replaced_in, Some(1));
        assert_eq!(p.steps[1].replaced_in, None, "a running step is kept");
        assert_eq!(p.ready(), [4]);
        assert_eq!(p.live().count(), 3);
        let view = p.view();
        assert!(view.contains("revision 1"), "{view}");
        assert!(
            view.contains("0. [✗] s0 (replaced in revision 1)"),
            "{view}"
        );
        assert!(view.contains("5. [ ] join (after steps 1, 4)"), "{view}");
        // A replaced step cannot be named again.
        let e = p
            .revise(vec![("y".into(), Some(vec![0]))], &p.replaceable())
            .unwrap_err();
        assert!(e.contains("replaced in revision 1"), "{e}");
    }

    #[test]
    fn a_revision_keeps_steps_waiting_for_approval_and_steps_that_failed_since() {
        let mut p = plan(4);
        p.depend(vec![
            Some(vec![]),
            Some(vec![]),
            Some(vec![]),
            Some(vec![0]),
        ])
        .unwrap();
        set(&mut p, 0, StepStatus::Failed);
        set(&mut p, 1, StepStatus::AwaitingApproval);
        set(&mut p, 2, StepStatus::InProgress);
        p.block_dependents();
        let shown = p.replaceable();
        assert_eq!(shown, [0, 3], "a paused step is kept, like a running one");
        // Step 2 fails while the model revises: it was not shown as replaced, so it stays.
        set(&mut p, 2, StepStatus::Failed);
        let r = p
            .revise(vec![("redo".into(), Some(vec![1]))], &shown)
            .unwrap();
        assert_eq!(r.replaced, [0, 3]);
        assert!(p.steps[2].is_live());
        assert_eq!(p.unfinished(), [2], "left for the flow to settle");
    }

    #[test]
    fn an_unannotated_revision_of_a_graph_stays_in_order_after_what_runs() {
        let mut p = plan(3);
        p.depend(vec![Some(vec![]), Some(vec![]), Some(vec![0])])
            .unwrap();
        set(&mut p, 0, StepStatus::Completed);
        set(&mut p, 1, StepStatus::InProgress);
        set(&mut p, 2, StepStatus::Failed);
        let r = p.replaceable();
        p.revise(vec![("a".into(), None), ("b".into(), None)], &r)
            .unwrap();
        assert_eq!(p.steps[3].depends_on, Some(vec![1]));
        assert_eq!(p.steps[4].depends_on, Some(vec![3]));
        // A sequential plan's revision without dependencies stays sequential.
        let mut p = plan(2);
        set(&mut p, 0, StepStatus::Completed);
        set(&mut p, 1, StepStatus::Failed);
        let r = p.replaceable();
        p.revise(vec![("c".into(), None)], &r).unwrap();
        assert!(!p.is_graph());
        assert_eq!(p.ready(), [2]);
    }
}
