//! The DAG checks of `#[workflow]`: unknown steps, self and duplicate edges, cycles.

use std::collections::BTreeMap;

use syn::Ident;

use crate::errors::Errors;

/// One step's name and the steps it runs after, as written.
pub(crate) struct Node<'a> {
    pub(crate) field: &'a Ident,
    pub(crate) after: Vec<&'a Ident>,
}

/// Reports unknown steps, self edges and duplicate edges (each on its token), then the first
/// cycle (named in run order, on the edge that closes it).
pub(crate) fn check(nodes: &[Node<'_>], errors: &mut Errors) {
    let index: BTreeMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.field.to_string(), i))
        .collect();
    let known: Vec<String> = nodes.iter().map(|node| node.field.to_string()).collect();
    let mut edges: Vec<Vec<(usize, &Ident)>> = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        let mut seen: Vec<&Ident> = Vec::new();
        for &prerequisite in &node.after {
            if prerequisite == node.field {
                errors.spanned(
                    prerequisite,
                    format!("step `{prerequisite}` cannot run after itself"),
                );
            } else if seen.contains(&prerequisite) {
                errors.spanned(
                    prerequisite,
                    format!(
                        "duplicate edge: `{}` already runs after `{prerequisite}`",
                        node.field
                    ),
                );
            } else if let Some(&target) = index.get(&prerequisite.to_string()) {
                edges[i].push((target, prerequisite));
            } else {
                errors.spanned(
                    prerequisite,
                    format!(
                        "unknown step `{prerequisite}`; the steps are: {}",
                        known.join(", ")
                    ),
                );
            }
            seen.push(prerequisite);
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        // Named in the order the steps would run: each one waits for the one before it.
        let mut names: Vec<String> = cycle
            .iter()
            .map(|&(node, _)| nodes[node].field.to_string())
            .chain(std::iter::once(nodes[cycle[0].0].field.to_string()))
            .collect();
        names.reverse();
        if let Some(&(_, closing)) = cycle.last() {
            errors.spanned(
                closing,
                format!("the steps form a cycle: {}", names.join(" -> ")),
            );
        }
    }
}

/// A cycle as (step, the edge token leading to the next step), following "runs after" edges.
fn find_cycle<'a>(edges: &[Vec<(usize, &'a Ident)>]) -> Option<Vec<(usize, &'a Ident)>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    fn visit<'a>(
        node: usize,
        edges: &[Vec<(usize, &'a Ident)>],
        marks: &mut [Mark],
        path: &mut Vec<(usize, &'a Ident)>,
    ) -> Option<Vec<(usize, &'a Ident)>> {
        marks[node] = Mark::Active;
        for &(next, token) in &edges[node] {
            path.push((node, token));
            match marks[next] {
                Mark::Active => {
                    let start = path.iter().position(|&(n, _)| n == next).unwrap_or(0);
                    return Some(path[start..].to_vec());
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, edges, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
            path.pop();
        }
        marks[node] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; edges.len()];
    for node in 0..edges.len() {
        if marks[node] == Mark::New {
            let mut path = Vec::new();
            if let Some(cycle) = visit(node, edges, &mut marks, &mut path) {
                return Some(cycle);
            }
        }
    }
    None
}
