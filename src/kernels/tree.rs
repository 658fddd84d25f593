//! Tree verify (design §4 VT): ReplaySSM for draft trees (EAGLE top-k > 1, NGRAM).
//!
//! Kernel **VT** is kernel V given a parent per draft position ([`crate::verify`] and
//! [`Stream::verify`] with a tree): the strictly-lower window mask
//! becomes the strict-ancestor mask and the decays sum along each node's root path, so every
//! node's output is kernel R's output along its root path. Kernel **FT** is kernel F in path
//! mode ([`crate::fold`] with [`AcceptedPaths`], [`Stream::fold`] with a paths array): it
//! replays an accepted root-to-node path (window positions, in order) into the checkpoint,
//! bit-identical to R along that path.
//!
//! Device code: `csrc/include/replayssm/device/verify.cuh` (`build_tree`, the masks) and
//! `replay.cuh` (`accepted_path_length`, `replay_slot` with a path); launchers `verify.cu`,
//! `fold.cu`; f32/f64 reference `reference::tree_outputs`; tests `tests/tree.rs`.
//!
//! Limits: at most [`MAX_TREE_NODES`] nodes per request (root/bonus position included), hence
//! depth at most [`MAX_TREE_NODES`]; any branching.

use crate::checks::check_count;
use crate::error::{Error, Result};
use crate::limits::MAX_TREE_NODES;
#[cfg(doc)]
use crate::memory::Stream;

fn tree_error(why: String) -> Error {
    Error::InvalidValue {
        what: "draft tree",
        why,
    }
}

/// The draft trees of one verify batch, validated: request `r` owns tokens
/// `cu_seqlens[r]..cu_seqlens[r+1]` (its window positions `0..n`), and `parent[t]` is the window
/// position of token `t`'s parent within its request, `-1` for a child of the checkpoint.
/// Parents precede children (topological order) and a request has at most
/// [`MAX_TREE_NODES`] nodes. A linear chain is the tree with `parent = i - 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraftTree {
    parent: Vec<i32>,
    cu_seqlens: Vec<i32>,
}

impl DraftTree {
    pub fn new(parent: Vec<i32>, cu_seqlens: &[i32]) -> Result<Self> {
        if cu_seqlens.len() < 2 || cu_seqlens[0] != 0 {
            return Err(tree_error(format!(
                "cu_seqlens must be [B+1] with B >= 1 and start at 0, got {cu_seqlens:?}"
            )));
        }
        for (r, w) in cu_seqlens.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(tree_error(format!(
                    "cu_seqlens decreases at request {r}: {cu_seqlens:?}"
                )));
            }
            let nodes = (w[1] - w[0]) as usize;
            if nodes > MAX_TREE_NODES {
                return Err(tree_error(format!(
                    "request {r} has {nodes} draft nodes; the tree kernels take at most {MAX_TREE_NODES} per request"
                )));
            }
        }
        let n = cu_seqlens[cu_seqlens.len() - 1] as usize;
        check_count("parent", parent.len(), n, "one per token")?;
        // The rule the C ABI and the kernels apply to `parent` (every request a live row here).
        crate::checks::indices::parents(&parent, cu_seqlens, &vec![0; cu_seqlens.len() - 1])?;
        Ok(DraftTree {
            parent,
            cu_seqlens: cu_seqlens.to_vec(),
        })
    }

    /// The linear chain of each request (`parent = i - 1`): what kernel V assumes.
    pub fn chain(cu_seqlens: &[i32]) -> Result<Self> {
        let mut parent = vec![];
        for w in cu_seqlens.windows(2) {
            parent.extend((0..(w[1] - w[0]).max(0)).map(|i| i - 1));
        }
        DraftTree::new(parent, cu_seqlens)
    }

    /// `[N]` parent window positions.
    pub fn parent(&self) -> &[i32] {
        &self.parent
    }
    pub fn cu_seqlens(&self) -> &[i32] {
        &self.cu_seqlens
    }
    pub fn requests(&self) -> usize {
        self.cu_seqlens.len() - 1
    }
    /// Nodes of request `r`'s tree.
    pub fn nodes(&self, r: usize) -> usize {
        (self.cu_seqlens[r + 1] - self.cu_seqlens[r]) as usize
    }
    /// Parent of request `r`'s window position `i`.
    pub fn parent_of(&self, r: usize, i: usize) -> Option<usize> {
        let p = self.parent[self.cu_seqlens[r] as usize + i];
        (p >= 0).then_some(p as usize)
    }
    /// Window positions from the root to node `i` of request `r` (inclusive, in order).
    pub fn root_path(&self, r: usize, i: usize) -> Vec<usize> {
        let mut path = vec![i];
        while let Some(p) = self.parent_of(r, path[path.len() - 1]) {
            path.push(p);
        }
        path.reverse();
        path
    }
    /// Longest root path of request `r`'s tree (0 for an empty request).
    pub fn depth(&self, r: usize) -> usize {
        (0..self.nodes(r))
            .map(|i| self.root_path(r, i).len())
            .max()
            .unwrap_or(0)
    }

    /// Refuses a tree built for other request ranges than `cu_seqlens`.
    pub fn check_matches(&self, cu_seqlens: &[i32]) -> Result<()> {
        if self.cu_seqlens != cu_seqlens {
            return Err(tree_error(format!(
                "the tree was built for cu_seqlens {:?}, the verify's are {cu_seqlens:?}",
                self.cu_seqlens
            )));
        }
        Ok(())
    }
}

/// The accepted paths of a tree commit, validated against their [`DraftTree`]: row `b` of a
/// `[B, width]` i32 matrix lists request `b`'s accepted nodes as window positions from the root
/// (a child of the checkpoint) down, each the parent of the next, padded with `-1`. An empty row
/// commits nothing. The bonus token is the last node of the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedPaths {
    paths: Vec<i32>,
    width: usize,
    lens: Vec<i32>,
}

impl AcceptedPaths {
    pub fn new(tree: &DraftTree, paths: Vec<i32>, width: usize) -> Result<Self> {
        let batch = tree.requests();
        if width == 0 || width > MAX_TREE_NODES || paths.len() != batch * width {
            return Err(Error::Shape {
                tensor: "accept_path",
                expected: format!("[{batch}, P] with 1 <= P <= {MAX_TREE_NODES}"),
                got: format!("{} elements with P = {width}", paths.len()),
            });
        }
        // The rule the C ABI's path mode applies (increasing positions, -1 padded), then the
        // tree's own: each path follows parent links within its request's nodes.
        crate::checks::indices::paths(&paths, width, &vec![0; batch], MAX_TREE_NODES as i32)?;
        let mut lens = Vec::with_capacity(batch);
        for (b, row) in paths.chunks_exact(width).enumerate() {
            let n = row.iter().take_while(|&&x| x >= 0).count();
            if let Some(&bad) = row[n..].iter().find(|&&x| x != -1) {
                return Err(Error::InvalidValue {
                    what: "accept_path",
                    why: format!("row {b} is {row:?}: after the path only -1 padding may follow, got {bad}"),
                });
            }
            let mut expected_parent = None;
            for &node in &row[..n] {
                let node = node as usize;
                if node >= tree.nodes(b) {
                    return Err(Error::InvalidValue {
                        what: "accept_path",
                        why: format!(
                            "row {b} is {row:?}: position {node} is not a node of request {b}'s tree ({} nodes)",
                            tree.nodes(b)
                        ),
                    });
                }
                if tree.parent_of(b, node) != expected_parent {
                    return Err(Error::InvalidValue {
                        what: "accept_path",
                        why: format!(
                            "row {b} is {row:?}: node {node}'s parent is {:?}, not {:?}; a path starts at a child of the checkpoint and follows parent links",
                            tree.parent_of(b, node),
                            expected_parent
                        ),
                    });
                }
                expected_parent = Some(node);
            }
            lens.push(n as i32);
        }
        Ok(AcceptedPaths { paths, width, lens })
    }

    /// The root paths of request `b`'s deepest accepted node `accepted[b]` (`None` = nothing
    /// accepted), padded to the longest of them.
    pub fn from_nodes(tree: &DraftTree, accepted: &[Option<usize>]) -> Result<Self> {
        check_count("accepted nodes", accepted.len(), tree.requests(), "one per request")?;
        let mut rows = vec![];
        for (b, a) in accepted.iter().enumerate() {
            rows.push(match *a {
                Some(i) if i >= tree.nodes(b) => {
                    return Err(Error::InvalidValue {
                        what: "accepted nodes",
                        why: format!("request {b}: node {i} of a tree of {} nodes", tree.nodes(b)),
                    })
                }
                Some(i) => tree.root_path(b, i),
                None => vec![],
            });
        }
        let width = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut paths = vec![-1; rows.len() * width];
        for (b, row) in rows.iter().enumerate() {
            for (t, &node) in row.iter().enumerate() {
                paths[b * width + t] = node as i32;
            }
        }
        AcceptedPaths::new(tree, paths, width)
    }

    /// `[B, width]` window positions, -1 padded.
    pub fn as_slice(&self) -> &[i32] {
        &self.paths
    }
    pub fn width(&self) -> usize {
        self.width
    }
    /// Accepted path length of each request (tokens the commit replays).
    pub fn lens(&self) -> &[i32] {
        &self.lens
    }
    /// Request `b`'s path (window positions, root first).
    pub fn path(&self, b: usize) -> &[i32] {
        &self.paths[b * self.width..b * self.width + self.lens[b] as usize]
    }
}
