//! Listing the generated tree in key order without materializing it: seeking into the runs of
//! a directory's children by binary search, merging them with a `Cursor`, and walking
//! sub-directories for a flat listing (see the module docs of `pseudo` for the cost). Separate
//! from `tree` because this is the one subtle algorithm here, checked against a brute-force
//! listing in the tests.

use super::tree::{Kind, Run, Tree};
use crate::store::{ListPage, ListRequest};

/// First `v` in `lo..hi` for which `pred` holds (`pred` false then true), or `hi`.
fn first_where(mut lo: u64, mut hi: u64, mut pred: impl FnMut(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

impl Tree {
    /// First number of `run` whose child name is greater than `after` (or at least `at_least`).
    fn seek_run(&self, run: &Run, after: Option<&str>, at_least: &str) -> u64 {
        let mut start = run.lo;
        if !at_least.is_empty() {
            start = first_where(start, run.hi, |v| {
                self.child(run.kind, v).as_str() >= at_least
            });
        }
        if let Some(after) = after {
            start = first_where(start, run.hi, |v| self.child(run.kind, v).as_str() > after);
        }
        start
    }

    /// The greatest child of a directory at `depth` whose name is at most `m`.
    fn last_at_or_before(&self, depth: usize, m: &str) -> Option<(Kind, String)> {
        self.levels[depth]
            .iter()
            .filter_map(|run| {
                let first_after =
                    first_where(run.lo, run.hi, |v| self.child(run.kind, v).as_str() > m);
                (first_after > run.lo).then(|| (run.kind, self.child(run.kind, first_after - 1)))
            })
            .max_by(|a, b| a.1.cmp(&b.1))
    }

    /// One page of `request`, at most `limit` entries.
    pub(super) fn list(&self, request: &ListRequest, limit: usize) -> ListPage {
        let prefix = request.prefix.as_str();
        let (dir, partial) = match prefix.rfind('/') {
            Some(i) => prefix.split_at(i + 1),
            None => ("", prefix),
        };
        let Some(depth) = self.dir_depth(dir) else {
            return ListPage::default();
        };
        let marker = request
            .continuation
            .as_deref()
            .max(request.start_after.as_deref());
        // The marker as seen from `dir`: every entry starts with `dir`.
        let after = match marker {
            Some(m) if m.starts_with(dir) => Some(&m[dir.len()..]),
            Some(m) if m < dir => None,
            Some(_) => return ListPage::default(),
            None => None,
        };
        if request.delimited {
            self.list_delimited(dir, depth, partial, after, limit)
        } else {
            self.list_flat(dir, depth, partial, after, limit)
        }
    }

    fn list_delimited(
        &self,
        dir: &str,
        depth: usize,
        partial: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ListPage {
        let mut cursor = Cursor::new(self, depth, after, partial);
        let mut page = ListPage::default();
        let mut taken = 0;
        let mut last = None;
        while let Some((kind, name)) = cursor.pop_matching(partial) {
            if taken == limit {
                page.next = last;
                break;
            }
            let key = format!("{dir}{name}");
            last = Some(key.clone());
            match kind {
                Kind::Dir => page.common_prefixes.push(key),
                Kind::File => page.objects.push(self.meta(key)),
            }
            taken += 1;
        }
        page
    }

    fn list_flat(
        &self,
        dir: &str,
        depth: usize,
        partial: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ListPage {
        let mut stack = vec![Frame {
            path: dir.to_string(),
            depth,
            cursor: Cursor::new(self, depth, after, partial),
            partial: partial.to_string(),
        }];
        // Resume inside the sub-directory the marker points into, at every level it names.
        if let Some(mut m) = after {
            let mut path = dir.to_string();
            let mut d = depth;
            let mut only = partial;
            while let Some((Kind::Dir, name)) = self.last_at_or_before(d, m) {
                if !(name.starts_with(only) && m.starts_with(&name)) {
                    break;
                }
                m = &m[name.len()..];
                path.push_str(&name);
                d += 1;
                only = "";
                stack.push(Frame {
                    path: path.clone(),
                    depth: d,
                    cursor: Cursor::new(self, d, Some(m), ""),
                    partial: String::new(),
                });
            }
        }
        let mut page = ListPage::default();
        while let Some(frame) = stack.last_mut() {
            let Some((kind, name)) = frame.cursor.pop_matching(&frame.partial) else {
                stack.pop();
                continue;
            };
            let key = format!("{}{name}", frame.path);
            match kind {
                Kind::File => {
                    if page.objects.len() == limit {
                        page.next = page.objects.last().map(|o| o.key.clone());
                        break;
                    }
                    page.objects.push(self.meta(key));
                }
                Kind::Dir => {
                    let depth = frame.depth + 1;
                    stack.push(Frame {
                        path: key,
                        depth,
                        cursor: Cursor::new(self, depth, None, ""),
                        partial: String::new(),
                    });
                }
            }
        }
        page
    }
}

/// One directory being walked by a flat listing.
struct Frame<'t> {
    path: String,
    depth: usize,
    cursor: Cursor<'t>,
    /// Only children starting with this (the partial last segment of the listing's prefix).
    partial: String,
}

/// The next number of one run and its child name.
struct Head {
    run: Run,
    next: u64,
    name: String,
}

/// Walks the children of one directory in key order: a merge of its runs.
struct Cursor<'t> {
    tree: &'t Tree,
    heads: Vec<Head>,
}

impl<'t> Cursor<'t> {
    /// Positioned at the first child greater than `after` and at least `at_least`.
    fn new(tree: &'t Tree, depth: usize, after: Option<&str>, at_least: &str) -> Cursor<'t> {
        let heads = tree.levels[depth]
            .iter()
            .filter_map(|run| {
                let next = tree.seek_run(run, after, at_least);
                (next < run.hi).then(|| Head {
                    run: *run,
                    next,
                    name: tree.child(run.kind, next),
                })
            })
            .collect();
        Cursor { tree, heads }
    }

    /// The next child, if it starts with `partial`. Children starting with one string are
    /// contiguous in key order, so the first that does not ends the walk.
    fn pop_matching(&mut self, partial: &str) -> Option<(Kind, String)> {
        let (i, head) = self
            .heads
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.name.cmp(&b.1.name))?;
        if !head.name.starts_with(partial) {
            self.heads.clear();
            return None;
        }
        let head = &mut self.heads[i];
        let kind = head.run.kind;
        head.next += 1;
        let name = if head.next < head.run.hi {
            std::mem::replace(&mut head.name, self.tree.child(kind, head.next))
        } else {
            self.heads.swap_remove(i).name
        };
        Some((kind, name))
    }
}
