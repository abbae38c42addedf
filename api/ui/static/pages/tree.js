// Owns the Tree canvas: one MCTS tree drawn as SVG, root on the left and one row per visible leaf
// (a node per API node, coloured by Q = value/N), terminal rewards on the leaves, good (reward >= the
// iteration's alpha) and bad leaves outlined, a chosen pair's paths drawn from its divergence node.
// Built for trees of a thousand nodes: search over action/observation/thought text (matches
// highlighted, Enter jumps to the next), folding of unvisited and of closed (fully terminal)
// branches and of any branch by hand, a minimap of the whole tree with the viewport on it, the view
// centred on a chosen pair's paths or node, action labels once zoomed in far enough to read them,
// keyboard navigation (the nodes take focus; arrows: parent, child, siblings; Enter opens; "-"
// folds), and live growth: while the tree is searched its NodesExpanded / RolloutFinished /
// LeafRecorded events from /v1/events are applied to the loaded nodes (no reload of the tree).
// The bad (or good) leaves are listed in row order and stepped through (prev / next); a leaf's
// kind shows as a shape inside it too (check: good, cross: bad), not by colour alone; "fit" keeps a
// readable scale on a tree too tall to show at once (its whole depth, a note on how to move).
// Click a node for its history, candidates and visits; zoom with the wheel or buttons, drag to pan.

import { follow, get } from "../api.js";
import { fmt, h, link, s, shortId, valueColour, mount } from "../dom.js";

const COL = 200; // horizontal distance between depths (room for an action label)
const ROW = 28; // vertical distance between leaf rows
const R = 8;
const LABEL_MIN_SCALE = 0.85; // pixels per unit from which action labels are drawn
const REWARD_MIN_SCALE = 0.3; // ... and leaf rewards and fold badges
const FIT_MIN_SCALE = 0.45; // "fit" never zooms out further: rows 12 px apart, nodes 7 px across
const SVG_NS = "http://www.w3.org/2000/svg";
const MAX_LABELS = 600;
const MAX_LISTED = 500; // leaves listed by name (the buttons step through all of them)
const LABEL_CHARS = 28;
const TREE_EVENTS = ["NodesExpanded", "RolloutFinished", "LeafRecorded", "TreeCompleted", "SearchFailed"];

/** The tree's structure: nodes by id, children (sorted by action) and the root. */
function index(nodes) {
  const byId = new Map(nodes.map((n) => [n.node_id, n]));
  const children = new Map(nodes.map((n) => [n.node_id, []]));
  let root = null;
  for (const n of nodes) {
    if (n.parent_id && children.has(n.parent_id)) children.get(n.parent_id).push(n);
    else if (!root || n.depth < root.depth) root = n;
  }
  for (const list of children.values()) list.sort((a, b) => (a.action < b.action ? -1 : a.action > b.action ? 1 : 0));
  return { byId, children, root };
}

function pathTo(byId, nodeId) {
  const path = [];
  let node = byId.get(nodeId);
  while (node) {
    path.unshift(node);
    node = node.parent_id ? byId.get(node.parent_id) : null;
  }
  return path;
}

/** Nodes whose whole subtree is terminal (a done node, or expanded children all closed). */
function closedSet(root, children) {
  const closed = new Set();
  if (!root) return closed;
  const order = [];
  const stack = [root];
  while (stack.length) {
    const node = stack.pop();
    order.push(node);
    for (const k of children.get(node.node_id)) stack.push(k);
  }
  for (let i = order.length - 1; i >= 0; i--) {
    const node = order[i];
    const kids = children.get(node.node_id);
    if (node.done || (kids.length && kids.every((k) => closed.has(k.node_id)))) closed.add(node.node_id);
  }
  return closed;
}

/**
 * Which nodes are drawn and where: `visibleKids(node)` decides the children shown (folding), leaves
 * take the next row, parents sit level with the middle of their children. Returns positions, the
 * shown children, how many descendants each folded node hides, and the extent.
 */
function layout(root, children, visibleKids) {
  const pos = new Map();
  const shown = new Map();
  const hidden = new Map();
  let rows = 0;
  let maxDepth = 0;
  const stack = root ? [[root, false]] : [];
  while (stack.length) {
    const [node, expanded] = stack.pop();
    if (!expanded) {
      const kids = visibleKids(node);
      shown.set(node.node_id, kids);
      const all = children.get(node.node_id);
      if (kids.length < all.length) hidden.set(node.node_id, countBelow(all.filter((k) => !kids.includes(k)), children));
      if (kids.length) {
        stack.push([node, true]);
        for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], false]);
        continue;
      }
    }
    const kids = shown.get(node.node_id);
    const y = kids.length ? (pos.get(kids[0].node_id).y + pos.get(kids[kids.length - 1].node_id).y) / 2 : rows++ * ROW;
    pos.set(node.node_id, { x: node.depth * COL, y });
    maxDepth = Math.max(maxDepth, node.depth);
  }
  return { pos, shown, hidden, width: maxDepth * COL, height: Math.max(0, rows - 1) * ROW };
}

function countBelow(nodes, children) {
  let count = 0;
  const stack = [...nodes];
  while (stack.length) {
    const node = stack.pop();
    count++;
    for (const k of children.get(node.node_id)) stack.push(k);
  }
  return count;
}

function truncate(text, max) {
  const flat = String(text || "").replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function mark(name) {
  try {
    performance.mark(name);
  } catch (_) {
    // marks are for the benchmark only
  }
}

export async function render(main, [treeId], query) {
  const routeStarted = performance.now();
  const wanted = query.get("pair");
  const [tree, wantedPair] = await Promise.all([
    get(`/v1/trees/${treeId}`),
    wanted ? get(`/v1/pairs/${wanted}`).catch(() => null) : Promise.resolve(null),
  ]);
  let alpha = 1.0;
  if (tree.run_id) {
    const run = await get(`/v1/runs/${tree.run_id}`);
    const it = run.iterations.find((i) => i.iteration === tree.iteration);
    if (it) alpha = it.alpha;
  }

  let { byId, children, root } = index(tree.nodes);
  let closed = closedSet(root, children);
  const folded = new Set(); // folded by hand (or by the toolbar's "fold all closed")
  const unfolded = new Set(); // unfolded by hand although the toolbar folds them
  const options = { unvisited: false, closed: false };
  let pinned = new Set(); // nodes that stay visible whatever is folded: the pair's paths, the jump target
  let pair = wantedPair && wantedPair.tree_id === treeId ? wantedPair : null;
  let selected = null;
  let focused = null;
  let matches = [];
  let matchAt = -1;
  let geometry = null;

  const edges = s("g", { class: "edges" });
  const highlight = s("g", { class: "highlight" });
  const nodeLayer = s("g", { class: "nodes" });
  // good and bad leaves differ by shape too (a check, a cross inside the node), not by colour alone
  const leafMarks = s("g", { class: "leaf-marks", "aria-hidden": "true" },
    s("path", { class: "leaf-mark-halo" }), s("path", { class: "leaf-mark good" }), s("path", { class: "leaf-mark bad" }));
  const rewards = s("g", { class: "rewards" });
  const labels = s("g", { class: "labels" });
  const svg = s("svg", { id: "tree-canvas", class: "canvas", role: "tree", "aria-label": `tree ${treeId}`, tabindex: "-1" }, edges, highlight, nodeLayer, leafMarks, rewards, labels);
  const miniDots = s("path", { class: "mini-dots" });
  const miniPair = s("path", { class: "mini-pair" });
  const miniView = s("rect", { id: "minimap-view", class: "mini-view" });
  // the minimap stretches the whole tree over its box (a tree of hundreds of leaves is very tall)
  const minimap = s("svg", { id: "tree-minimap", class: "minimap", preserveAspectRatio: "none", "aria-label": "minimap: click to move the view" }, miniDots, miniPair, miniView);
  const panel = h("aside", { id: "node-panel", class: "panel" }, h("p", { class: "muted" }, "Click a node (or focus it and press Enter) to see its history."));
  const count = h("span", { id: "node-count" }, `${tree.nodes.length} nodes`);
  const statusText = h("span", { id: "tree-status" }, tree.status);
  const searchInput = h("input", { id: "tree-search", type: "search", size: 28, placeholder: "search actions, observations…", "aria-label": "search nodes" });
  const searchCount = h("span", { id: "search-count", class: "muted" });
  const fitNote = h("p", { id: "fit-note", class: "muted", hidden: true });

  // ---- the view: a centre and a scale (pixels per unit) on the canvas's own size
  const view = { cx: 0, cy: 0, k: 1 };
  function canvasSize() {
    const rect = svg.getBoundingClientRect();
    return { w: rect.width || 800, h: rect.height || 560 };
  }
  let labelFrame = 0;
  function setView() {
    const { w, h: ht } = canvasSize();
    const vw = w / view.k, vh = ht / view.k;
    svg.setAttribute("viewBox", `${view.cx - vw / 2} ${view.cy - vh / 2} ${vw} ${vh}`);
    svg.dataset.scale = String(view.k);
    miniView.setAttribute("x", view.cx - vw / 2);
    miniView.setAttribute("y", view.cy - vh / 2);
    miniView.setAttribute("width", vw);
    miniView.setAttribute("height", vh);
    if (!labelFrame) labelFrame = requestAnimationFrame(() => { labelFrame = 0; drawLabels(); });
  }
  function fitBox(box, maxScale = 1.6) {
    const { w, h: ht } = canvasSize();
    const pad = 2 * ROW;
    const bw = box.x1 - box.x0 + 2 * pad, bh = box.y1 - box.y0 + 2 * pad;
    view.k = Math.min(w / bw, ht / bh, maxScale);
    view.cx = (box.x0 + box.x1) / 2;
    view.cy = (box.y0 + box.y1) / 2;
    setView();
  }
  /** The whole tree when it can be read at once; a tree too tall for that (hundreds of leaf rows)
   * keeps a readable scale instead of a sliver: its whole depth across the canvas when that fits,
   * around the root's row, and a note pointing at the minimap, the leaf list and folding. */
  function fitAll() {
    const { w, h: ht } = canvasSize();
    const pad = 2 * ROW;
    const bw = geometry.width + 2 * pad, bh = geometry.height + 2 * pad;
    const whole = Math.min(w / bw, ht / bh, 1.6);
    if (whole >= FIT_MIN_SCALE) {
      fitBox({ x0: 0, y0: 0, x1: geometry.width, y1: geometry.height });
      fitNote.hidden = true;
      svg.dataset.fit = "whole";
      return;
    }
    view.k = Math.max(FIT_MIN_SCALE, Math.min(w / bw, 1.6));
    view.cx = w / view.k >= bw ? geometry.width / 2 : -pad + w / 2 / view.k; // the root's side first
    view.cy = root ? geometry.pos.get(root.node_id).y : geometry.height / 2;
    setView();
    const rows = Math.round(geometry.height / ROW) + 1;
    const seen = Math.max(1, Math.floor(ht / (ROW * view.k)));
    fitNote.textContent = `The tree is ${rows} rows tall: "fit" shows about ${seen} of them at a readable size. ` +
      "Drag or use the minimap to move, the leaf list to jump to a leaf, or fold unvisited / closed branches.";
    fitNote.hidden = false;
    svg.dataset.fit = "readable";
  }
  function boxOf(ids) {
    const box = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
    for (const id of ids) {
      const p = geometry.pos.get(id);
      if (!p) continue;
      box.x0 = Math.min(box.x0, p.x); box.x1 = Math.max(box.x1, p.x);
      box.y0 = Math.min(box.y0, p.y); box.y1 = Math.max(box.y1, p.y);
    }
    return Number.isFinite(box.x0) ? box : null;
  }
  /** Centre `nodeId` (keeping the zoom, at least readable) unless it is already well inside the view. */
  function reveal(nodeId, force = false) {
    const p = geometry.pos.get(nodeId);
    if (!p) return;
    const { w, h: ht } = canvasSize();
    const margin = 3 * R;
    const inside = Math.abs(p.x - view.cx) * view.k < w / 2 - margin && Math.abs(p.y - view.cy) * view.k < ht / 2 - margin;
    if (inside && !force) return;
    view.k = Math.max(view.k, LABEL_MIN_SCALE);
    view.cx = p.x;
    view.cy = p.y;
    setView();
  }
  function zoom(factor, px, py) {
    const { w, h: ht } = canvasSize();
    // the point under (px, py) stays put
    const ux = view.cx + (px - w / 2) / view.k, uy = view.cy + (py - ht / 2) / view.k;
    view.k = Math.min(8, Math.max(0.005, view.k * factor));
    view.cx = ux - (px - w / 2) / view.k;
    view.cy = uy - (py - ht / 2) / view.k;
    setView();
  }

  // ---- folding
  function visibleKids(node) {
    const kids = children.get(node.node_id);
    const id = node.node_id;
    const keep = (k) => pinned.has(k.node_id);
    if (folded.has(id) && !unfolded.has(id)) return kids.filter(keep);
    if (options.closed && closed.has(id) && node !== root && !unfolded.has(id)) return kids.filter(keep);
    if (options.unvisited && !unfolded.has(id)) return kids.filter((k) => k.visits > 0 || keep(k));
    return kids;
  }
  function pin(ids) {
    pinned = new Set();
    for (const id of ids) for (const step of pathTo(byId, id)) pinned.add(step.node_id);
  }
  function pinnedNow() {
    const ids = [];
    if (pair) for (const id of [pair.bad_leaf_id, pair.good_leaf_id, pair.divergence_node_id]) if (id && byId.has(id)) ids.push(id);
    if (selected && byId.has(selected)) ids.push(selected);
    if (focused && byId.has(focused)) ids.push(focused);
    return ids;
  }

  // ---- drawing
  function leafKind(n) {
    const isLeaf = children.get(n.node_id).length === 0 && (n.visits > 0 || n.done);
    if (!isLeaf) return null;
    const reward = n.visits ? n.value_sum / n.visits : n.reward;
    return { reward, kind: reward >= alpha ? "good" : "bad" };
  }
  let circles = new Map(); // node id -> its circle, for the nodes drawn
  function draw() {
    pin(pinnedNow());
    geometry = layout(root, children, visibleKids);
    const { pos, hidden } = geometry;
    const tabTarget = focused && pos.has(focused) ? focused : root && root.node_id;
    // plain DOM calls, one path for all edges and no per-node text (labels and rewards are drawn
    // for the nodes in view only): a thousand nodes draw in a few tens of milliseconds
    const frag = document.createDocumentFragment();
    circles = new Map();
    let edgePath = "";
    let dots = "";
    let good = "";
    let bad = "";
    for (const [id, p] of pos) {
      const n = byId.get(id);
      if (n.parent_id && pos.has(n.parent_id)) {
        const a = pos.get(n.parent_id);
        edgePath += `M${a.x + R} ${a.y}C${a.x + COL / 2} ${a.y} ${p.x - COL / 2} ${p.y} ${p.x - R} ${p.y}`;
      }
      const leaf = leafKind(n);
      const hides = hidden.get(id) || 0;
      let cls = "node";
      if (leaf) cls += ` leaf ${leaf.kind}`;
      if (!n.valid) cls += " invalid";
      if (hides) cls += " folded";
      if (id === selected) cls += " selected";
      const c = document.createElementNS(SVG_NS, "circle");
      c.setAttribute("cx", p.x);
      c.setAttribute("cy", p.y);
      c.setAttribute("r", R);
      c.setAttribute("class", cls);
      c.setAttribute("fill", valueColour(n.q));
      c.setAttribute("tabindex", id === tabTarget ? "0" : "-1");
      c.setAttribute("role", "treeitem");
      c.setAttribute("aria-label", `${n.action || "root"}, N=${n.visits}${leaf ? `, ${leaf.kind} leaf, reward ${fmt(leaf.reward, 2)}` : ""}${hides ? `, ${hides} folded` : ""}`);
      c.setAttribute("data-node-id", id);
      c.setAttribute("data-visits", n.visits);
      c.setAttribute("data-q", n.q === null ? "" : n.q);
      c.setAttribute("data-depth", n.depth);
      if (hides) c.setAttribute("data-hidden", hides);
      frag.append(c);
      circles.set(id, c);
      dots += `M${p.x} ${p.y}h0`;
      if (leaf && !hides) {
        if (leaf.kind === "good") good += `M${p.x - 4} ${p.y}l2.8 3.4l5.2 -7`;
        else bad += `M${p.x - 3.5} ${p.y - 3.5}l7 7m0 -7l-7 7`;
      }
    }
    const [halo, goodMark, badMark] = leafMarks.children;
    halo.setAttribute("d", good + bad);
    goodMark.setAttribute("d", good);
    badMark.setAttribute("d", bad);
    edges.replaceChildren(s("path", { d: edgePath, class: "edge" }));
    nodeLayer.replaceChildren(frag);
    miniDots.setAttribute("d", dots);
    const pad = 2 * ROW;
    minimap.setAttribute("viewBox", `${-pad} ${-pad} ${geometry.width + 2 * pad} ${geometry.height + 2 * pad}`);
    const aspect = (geometry.height + 2 * pad) / (geometry.width + 2 * pad);
    minimap.style.height = `${Math.round(Math.min(160, Math.max(60, 200 * aspect)))}px`;
    minimap.style.width = `${Math.round(Math.min(200, Math.max(120, 160 / aspect)))}px`;
    drawPair();
    markMatches();
    count.textContent = `${byId.size} nodes${pos.size < byId.size ? ` (${pos.size} shown, ${byId.size - pos.size} folded)` : ""}`;
    svg.dataset.shown = String(pos.size);
    setView();
  }
  /** Text for the nodes in view: rewards and fold badges from a small scale, action labels once
   * readable (culled to the viewport, so the cost does not grow with the tree). */
  function drawLabels() {
    if (!geometry) return;
    const { w, h: ht } = canvasSize();
    const x0 = view.cx - w / 2 / view.k - COL, x1 = view.cx + w / 2 / view.k + COL;
    const y0 = view.cy - ht / 2 / view.k - ROW, y1 = view.cy + ht / 2 / view.k + ROW;
    const out = [];
    const marks = [];
    const withLabels = view.k >= LABEL_MIN_SCALE;
    if (view.k >= REWARD_MIN_SCALE) {
      for (const [id, p] of geometry.pos) {
        if (p.x < x0 || p.x > x1 || p.y < y0 || p.y > y1) continue;
        const n = byId.get(id);
        const hides = geometry.hidden.get(id) || 0;
        const leaf = hides ? null : leafKind(n);
        if (hides) marks.push(s("text", { x: p.x + R + 4, y: p.y + 4, class: "fold-badge", dataset: { nodeId: id } }, `+${hides}`));
        else if (leaf) marks.push(s("text", { x: p.x + R + 4, y: p.y + 4, class: `reward ${leaf.kind}` }, fmt(leaf.reward, 2)));
        if (withLabels && n.action && out.length < MAX_LABELS) {
          out.push(s("text", { x: p.x - R - 4, y: p.y - 5, class: "label", "text-anchor": "end", dataset: { nodeId: id } }, truncate(n.action, LABEL_CHARS)));
        }
        if (marks.length >= 2 * MAX_LABELS) break;
      }
    }
    rewards.replaceChildren(...marks);
    labels.replaceChildren(...out);
    svg.dataset.labels = String(out.length);
  }
  function circleOf(nodeId) {
    return circles.get(nodeId) || null;
  }
  function drawPair() {
    const els = [];
    const mini = [];
    if (pair) {
      for (const [leafId, cls] of [[pair.bad_leaf_id, "bad"], [pair.good_leaf_id, "good"]]) {
        if (!leafId || !byId.has(leafId)) continue;
        const path = pathTo(byId, leafId);
        for (let i = 1; i < path.length; i++) {
          if (path[i].depth <= pair.shared_steps) continue;
          const a = geometry.pos.get(path[i - 1].node_id), b = geometry.pos.get(path[i].node_id);
          if (!a || !b) continue;
          els.push(s("path", { d: `M${a.x} ${a.y}C${a.x + COL / 2} ${a.y} ${b.x - COL / 2} ${b.y} ${b.x} ${b.y}`, class: `pair-path ${cls}` }));
          mini.push(`M${a.x} ${a.y}L${b.x} ${b.y}`);
        }
      }
      const d = pair.divergence_node_id && geometry.pos.get(pair.divergence_node_id);
      if (d) els.push(s("circle", { cx: d.x, cy: d.y, r: R + 5, class: "divergence", dataset: { nodeId: pair.divergence_node_id } }));
    }
    highlight.replaceChildren(...els);
    miniPair.setAttribute("d", mini.join(""));
    for (const p of document.querySelectorAll("#tree-pairs li")) p.classList.toggle("current", !!pair && p.dataset.pairId === pair.pair_id);
  }
  /** The pair's nodes: the divergence and both paths below it. */
  function pairNodes(detail) {
    const ids = [];
    for (const leafId of [detail.bad_leaf_id, detail.good_leaf_id]) {
      if (!leafId || !byId.has(leafId)) continue;
      for (const step of pathTo(byId, leafId)) if (step.depth >= detail.shared_steps) ids.push(step.node_id);
    }
    if (detail.divergence_node_id) ids.push(detail.divergence_node_id);
    return ids;
  }
  function centrePair() {
    if (!pair) return;
    const box = boxOf(pairNodes(pair));
    if (box) fitBox(box);
    svg.dataset.centred = pair.pair_id;
  }

  // ---- selection, focus, keyboard
  function select(nodeId, { centre = false } = {}) {
    if (!byId.has(nodeId)) return;
    selected = nodeId;
    if (!geometry.pos.has(nodeId)) draw();
    for (const el of nodeLayer.querySelectorAll("circle.selected")) el.classList.remove("selected");
    const el = circleOf(nodeId);
    if (el) el.classList.add("selected");
    if (centre) reveal(nodeId, true);
    const node = byId.get(nodeId);
    const steps = pathTo(byId, nodeId);
    const kids = children.get(nodeId);
    const hides = geometry.hidden.get(nodeId) || 0;
    mount(panel,
      h("h3", {}, `Node ${shortId(nodeId)}`),
      h("p", { id: "node-stats" }, `depth ${node.depth} · N=${node.visits} · Q=${fmt(node.q)} · reward ${fmt(node.reward)} · ${node.done ? "done" : "open"}${node.valid ? "" : " · invalid action"}`),
      kids.length ? h("p", {}, h("button", { type: "button", id: "fold-node", onclick: () => toggleFold(nodeId) }, hides ? `Unfold (${hides} hidden)` : "Fold this branch")) : null,
      h("h4", {}, "History"),
      h("ol", { class: "history", start: 0 }, steps.map((step) => h("li", {},
        step.depth === 0 ? h("div", { class: "observation" }, step.observation) : [
          step.thought ? h("div", { class: "thought" }, `Thought: ${step.thought}`) : null,
          h("div", { class: "action" }, `Action: ${step.action}`),
          h("div", { class: "observation" }, step.observation),
        ]))),
      h("h4", {}, `Candidates (${kids.length})`),
      kids.length ? h("ul", { class: "candidates" }, kids.map((k) => h("li", {},
        h("a", { href: "#", onclick: (e) => { e.preventDefault(); focusNode(k.node_id); select(k.node_id); } }, k.action || "(empty)"),
        ` · N=${k.visits} · Q=${fmt(k.q)}${k.done ? " · terminal" : ""}`))) : h("p", { class: "muted" }, "none (leaf)"),
    );
  }
  function toggleFold(nodeId) {
    const hides = geometry.hidden.get(nodeId) || 0;
    if (hides) {
      folded.delete(nodeId);
      unfolded.add(nodeId);
    } else {
      unfolded.delete(nodeId);
      folded.add(nodeId);
    }
    const keep = selected;
    if (selected && selected !== nodeId && pathTo(byId, selected).some((n) => n.node_id === nodeId) && !hides) selected = nodeId;
    draw();
    if (keep) select(selected);
    focusNode(nodeId);
  }
  function focusNode(nodeId) {
    if (!byId.has(nodeId)) return;
    focused = nodeId;
    if (!geometry.pos.has(nodeId)) draw();
    for (const el of nodeLayer.querySelectorAll('circle[tabindex="0"]')) el.setAttribute("tabindex", "-1");
    const el = circleOf(nodeId);
    if (!el) return;
    el.setAttribute("tabindex", "0");
    reveal(nodeId);
    el.focus({ preventScroll: true });
    svg.dataset.focused = nodeId;
  }
  function neighbour(nodeId, key) {
    const node = byId.get(nodeId);
    const parent = node.parent_id && byId.get(node.parent_id);
    const siblings = parent ? geometry.shown.get(parent.node_id) || [] : [node];
    const i = siblings.findIndex((k) => k.node_id === nodeId);
    if (key === "ArrowLeft") return parent ? parent.node_id : null;
    if (key === "ArrowRight") {
      const kids = geometry.shown.get(nodeId) || [];
      if (!kids.length) return null;
      // the most visited child first: the way the search went
      return kids.reduce((best, k) => (k.visits > best.visits ? k : best), kids[0]).node_id;
    }
    if (key === "ArrowUp") return i > 0 ? siblings[i - 1].node_id : null;
    if (key === "ArrowDown") return i >= 0 && i < siblings.length - 1 ? siblings[i + 1].node_id : null;
    return null;
  }
  svg.addEventListener("keydown", (event) => {
    const id = event.target && event.target.dataset ? event.target.dataset.nodeId : null;
    if (!id || !byId.has(id)) return;
    if (["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"].includes(event.key)) {
      event.preventDefault();
      const next = neighbour(id, event.key);
      if (next) focusNode(next);
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      if (geometry.hidden.get(id)) toggleFold(id);
      select(id);
      focusNode(id);
    } else if (event.key === "-" || event.key === "+") {
      event.preventDefault();
      toggleFold(id);
    }
  });
  nodeLayer.addEventListener("click", (event) => {
    const id = event.target.dataset ? event.target.dataset.nodeId : null;
    if (!id) return;
    event.stopPropagation();
    focused = id;
    select(id);
    for (const el of nodeLayer.querySelectorAll('circle[tabindex="0"]')) el.setAttribute("tabindex", "-1");
    event.target.setAttribute("tabindex", "0");
  });
  nodeLayer.addEventListener("mouseover", (event) => {
    const el = event.target;
    const id = el.dataset ? el.dataset.nodeId : null;
    if (!id || el.firstChild || !byId.has(id)) return; // the tooltip is made when first hovered
    const n = byId.get(id);
    const hides = geometry.hidden.get(id) || 0;
    el.append(s("title", {}, `${n.action || "(root)"}\nN=${n.visits} Q=${fmt(n.q)}${hides ? `\n${hides} folded below` : ""}`));
  });
  rewards.addEventListener("click", (event) => {
    const id = event.target.dataset ? event.target.dataset.nodeId : null;
    if (id) toggleFold(id);
  });

  /** Every node depth-first, top to bottom: the order the rows are drawn in. */
  function rowOrder() {
    const ordered = [];
    const stack = root ? [root] : [];
    while (stack.length) {
      const node = stack.pop();
      ordered.push(node);
      const kids = children.get(node.node_id);
      for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
    }
    return ordered;
  }

  // ---- leaves: the bad (or good) leaves in row order, listed by name and stepped through
  const leafKindSelect = h("select", { id: "leaf-kind", "aria-label": "leaves to list and step through" },
    h("option", { value: "bad" }, "bad leaves"), h("option", { value: "good" }, "good leaves"));
  const leafCount = h("span", { id: "leaf-count", class: "muted", "aria-live": "polite" });
  const leafSummary = h("summary", {}, "Leaves");
  const leafList = h("ol", { id: "leaf-list", class: "leaf-list" });
  const leafDetails = h("details", { id: "leaves" }, leafSummary, leafList);
  leafDetails.addEventListener("toggle", () => { if (leafDetails.open) fillLeafList(); });
  let leaves = []; // the chosen kind's leaf ids, in row order
  let leafAt = -1;
  function listLeaves() {
    const kind = leafKindSelect.value;
    const current = leafAt >= 0 ? leaves[leafAt] : null;
    leaves = rowOrder().filter((n) => { const leaf = leafKind(n); return leaf && leaf.kind === kind; }).map((n) => n.node_id);
    leafAt = current ? leaves.indexOf(current) : -1;
    const name = `${kind} lea${leaves.length === 1 ? "f" : "ves"}`;
    leafCount.textContent = leafAt >= 0 ? `${leafAt + 1} of ${leaves.length} ${name}` : `${leaves.length} ${name}`;
    leafSummary.textContent = `${kind === "bad" ? "Bad" : "Good"} leaves (${leaves.length}): reward ${kind === "bad" ? "below" : "at least"} alpha ${alpha}`;
    leafList.dataset.kind = kind;
    leafList.dataset.count = String(leaves.length);
    if (leafDetails.open) fillLeafList();
    else mount(leafList); // built when opened: hundreds of links are not drawn with the first frame
  }
  function fillLeafList() {
    mount(leafList, leaves.slice(0, MAX_LISTED).map((id, i) => {
      const n = byId.get(id);
      return h("li", { dataset: { nodeId: id }, class: i === leafAt ? "current" : null },
        h("a", { href: "#", onclick: (e) => { e.preventDefault(); jumpLeaf(i); } }, truncate(n.action, 60) || "(root)"),
        ` · reward ${fmt(leafKind(n).reward, 2)} · depth ${n.depth}`);
    }), leaves.length > MAX_LISTED ? h("li", { class: "muted" }, `… ${leaves.length - MAX_LISTED} more: step to them with "next"`) : null);
  }
  function jumpLeaf(i) {
    if (!leaves.length) return;
    leafAt = (i + leaves.length) % leaves.length;
    const id = leaves[leafAt];
    selected = id;
    focused = id;
    draw();
    select(id, { centre: true });
    focusNode(id);
    leafCount.textContent = `${leafAt + 1} of ${leaves.length} ${leafKindSelect.value} leaves`;
    for (const li of leafList.children) li.classList.toggle("current", li.dataset.nodeId === id);
    svg.dataset.jumped = id;
  }
  leafKindSelect.addEventListener("change", () => { leafAt = -1; listLeaves(); });
  const prevLeaf = h("button", { type: "button", id: "prev-leaf", title: "the previous leaf of the chosen kind", onclick: () => jumpLeaf(leafAt < 0 ? -1 : leafAt - 1) }, "◀ prev");
  const nextLeaf = h("button", { type: "button", id: "next-leaf", title: "the next leaf of the chosen kind", onclick: () => jumpLeaf(leafAt + 1) }, "next ▶");

  // ---- search
  function markMatches() {
    const wantedIds = new Set(matches);
    for (const el of nodeLayer.querySelectorAll("circle.match")) el.classList.remove("match");
    for (const id of wantedIds) {
      const el = circleOf(id);
      if (el) el.classList.add("match");
    }
    const current = matchAt >= 0 ? matches[matchAt] : null;
    for (const el of nodeLayer.querySelectorAll("circle.current-match")) el.classList.remove("current-match");
    if (current && circleOf(current)) circleOf(current).classList.add("current-match");
  }
  function search(text) {
    const q = text.trim().toLowerCase();
    matches = [];
    matchAt = -1;
    if (q) {
      for (const n of rowOrder()) {
        if (`${n.action}\n${n.observation}\n${n.thought}`.toLowerCase().includes(q)) matches.push(n.node_id);
      }
    }
    searchCount.textContent = q ? (matches.length ? `${matches.length} match${matches.length === 1 ? "" : "es"}` : "no match") : "";
    markMatches();
  }
  function jump(step) {
    if (!matches.length) return;
    matchAt = (matchAt + step + matches.length) % matches.length;
    const id = matches[matchAt];
    searchCount.textContent = `${matchAt + 1} of ${matches.length}`;
    selected = id;
    focused = id;
    draw();
    select(id, { centre: true });
    svg.dataset.jumped = id;
  }
  let searchTimer = null;
  searchInput.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => search(searchInput.value), 120);
  });
  searchInput.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    clearTimeout(searchTimer);
    if (searchInput.dataset.searched !== searchInput.value) search(searchInput.value);
    searchInput.dataset.searched = searchInput.value;
    jump(event.shiftKey ? -1 : 1);
  });

  // ---- pointer: wheel zoom, drag pan, minimap
  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    const rect = svg.getBoundingClientRect();
    zoom(event.deltaY > 0 ? 1 / 1.15 : 1.15, event.clientX - rect.left, event.clientY - rect.top);
  }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, cx: view.cx, cy: view.cy };
  });
  const onMove = (event) => {
    if (!drag) return;
    view.cx = drag.cx - (event.clientX - drag.x) / view.k;
    view.cy = drag.cy - (event.clientY - drag.y) / view.k;
    setView();
  };
  const onUp = () => { drag = null; miniDrag = false; };
  window.addEventListener("pointermove", onMove);
  window.addEventListener("pointerup", onUp);
  let miniDrag = false;
  function miniMove(event) {
    const matrix = minimap.getScreenCTM();
    if (!matrix) return;
    const pt = new DOMPoint(event.clientX, event.clientY).matrixTransform(matrix.inverse());
    view.cx = pt.x;
    view.cy = pt.y;
    setView();
  }
  minimap.addEventListener("pointerdown", (event) => { event.stopPropagation(); miniDrag = true; miniMove(event); });
  minimap.addEventListener("pointermove", (event) => { if (miniDrag) miniMove(event); });
  const onResize = () => setView();
  window.addEventListener("resize", onResize);

  // ---- pairs of this tree (listed after the first render; a click centres without a reload)
  const pairList = h("ul", { id: "tree-pairs", class: "pairs" }, h("li", { class: "muted" }, "Loading pairs…"));
  const pairHeading = h("h2", {}, "Pairs in this tree");
  const pairCache = new Map(pair ? [[pair.pair_id, pair]] : []);
  async function choosePair(pairId) {
    if (!pairCache.has(pairId)) pairCache.set(pairId, await get(`/v1/pairs/${pairId}`));
    pair = pairCache.get(pairId);
    history.replaceState(null, "", `#/trees/${treeId}?pair=${pairId}`);
    draw();
    centrePair();
  }
  async function listPairs() {
    if (!tree.run_id) {
      mount(pairList, h("li", { class: "muted" }, "No pairs (the tree has no run)."));
      return;
    }
    const items = [];
    let cursor = null;
    do {
      const page = await get(`/v1/runs/${tree.run_id}/pairs`, { iteration: tree.iteration, limit: 500, cursor });
      items.push(...page.items.filter((p) => p.tree_id === treeId));
      cursor = page.next_cursor;
    } while (cursor && items.length < 2000);
    pairHeading.textContent = `Pairs in this tree (${items.length})`;
    if (!items.length) {
      mount(pairList, h("li", { class: "muted" }, "No pairs."));
      return;
    }
    mount(pairList, items.map((p) => h("li", { dataset: { pairId: p.pair_id }, class: pair && pair.pair_id === p.pair_id ? "current" : null },
      h("a", { href: `#/trees/${treeId}?pair=${p.pair_id}`, dataset: { pairId: p.pair_id }, onclick: (e) => { e.preventDefault(); choosePair(p.pair_id); } }, `pair ${shortId(p.pair_id)}`),
      ` · diverges at step ${p.shared_steps} · t'=${fmt(p.transition_index)} · ${p.status} · `,
      link(`#/pairs/${p.pair_id}`, "diff"))));
  }

  // ---- live growth: apply the tree's events after the snapshot's position
  let pending = 0;
  function applyLive(type, envelope) {
    const data = envelope.data || {};
    if (data.tree_id !== treeId) return;
    if (type === "NodesExpanded") {
      for (const r of data.nodes || []) {
        if (byId.has(r.node_id)) continue;
        tree.nodes.push({ ...r, visits: 0, value_sum: 0, q: null });
      }
      ({ byId, children, root } = index(tree.nodes));
    } else if (type === "RolloutFinished" || type === "LeafRecorded") {
      for (const n of pathTo(byId, data.leaf_id)) {
        n.visits += 1;
        n.value_sum += data.reward;
        n.q = n.value_sum / n.visits;
      }
      if (type === "RolloutFinished") tree.rollouts += 1;
      tree.best_reward = tree.best_reward === null ? data.reward : Math.max(tree.best_reward, data.reward);
    } else if (type === "TreeCompleted") {
      tree.status = "completed";
    } else if (type === "SearchFailed") {
      tree.status = "failed";
    }
    statusText.textContent = tree.status;
    bestText.textContent = fmt(tree.best_reward);
    if (!pending) {
      pending = setTimeout(() => {
        pending = 0;
        closed = closedSet(root, children);
        draw();
        if (matches.length || searchInput.value) search(searchInput.value);
        listLeaves();
        svg.dataset.live = String(byId.size);
      }, 150);
    }
  }

  const bestText = h("span", { id: "tree-best" }, fmt(tree.best_reward));
  listLeaves();
  const toggle = (id, key, label) => {
    const box = h("input", { type: "checkbox", id });
    box.addEventListener("change", () => {
      options[key] = box.checked;
      if (box.checked) unfolded.clear();
      draw();
    });
    return h("label", { class: "toggle" }, box, ` ${label}`);
  };
  mount(main,
    h("h1", {}, "Tree ", h("code", {}, treeId)),
    h("p", { class: "muted" },
      tree.run_id ? link(`#/runs/${tree.run_id}`, `run ${shortId(tree.run_id)}`) : "no run",
      ` · iteration ${tree.iteration} · task ${tree.task_id} · `, statusText, " · ", count,
      " · best reward ", bestText, ` · alpha ${alpha}`),
    h("div", { class: "toolbar" },
      h("button", { type: "button", id: "zoom-in", title: "zoom in", onclick: () => { const { w, h: ht } = canvasSize(); zoom(1.3, w / 2, ht / 2); } }, "+"),
      h("button", { type: "button", id: "zoom-out", title: "zoom out", onclick: () => { const { w, h: ht } = canvasSize(); zoom(1 / 1.3, w / 2, ht / 2); } }, "−"),
      h("button", { type: "button", id: "zoom-fit", title: "the whole tree", onclick: fitAll }, "fit"),
      h("button", { type: "button", id: "centre-pair", title: "centre the chosen pair", onclick: () => (pair ? centrePair() : selected && reveal(selected, true)) }, "centre"),
      searchInput, searchCount,
      toggle("fold-unvisited", "unvisited", "fold unvisited"),
      toggle("fold-closed", "closed", "fold closed branches")),
    h("div", { class: "toolbar", id: "leaf-tools" }, leafKindSelect, prevLeaf, nextLeaf, leafCount),
    h("p", { class: "legend" },
      h("span", { class: "swatch", style: `background:${valueColour(0)}` }), " Q=0 ",
      h("span", { class: "swatch", style: `background:${valueColour(0.5)}` }), " 0.5 ",
      h("span", { class: "swatch", style: `background:${valueColour(1)}` }), " 1 ",
      h("span", { class: "swatch unvisited" }), " unvisited · ",
      h("span", { class: "ring good" }), h("span", { class: "mark", "aria-hidden": "true" }, " ✓"), " good leaf (check) ",
      h("span", { class: "ring bad" }), h("span", { class: "mark", "aria-hidden": "true" }, " ✕"), " bad leaf (cross) ",
      h("span", { class: "ring divergence" }), " divergence · dotted outline: invalid action · +k: folded · keys: ←→ parent/child, ↑↓ siblings, Enter opens, − folds"),
    fitNote,
    h("div", { class: "tree-layout" }, h("div", { class: "canvas-wrap" }, svg, minimap), panel),
    leafDetails,
    pairHeading,
    pairList,
  );
  draw();
  const node = query.get("node");
  if (pair) centrePair();
  else if (node && byId.has(node)) {
    focused = node;
    draw();
    select(node, { centre: true });
  } else if (root) {
    // the whole depth across the canvas, around the root's row
    const { w } = canvasSize();
    view.k = Math.min(1.6, Math.max(0.05, w / (geometry.width + 4 * ROW)));
    view.cx = geometry.width / 2;
    view.cy = geometry.pos.get(root.node_id).y;
    setView();
  }
  if (node && byId.has(node) && pair) select(node);
  requestAnimationFrame(() => {
    mark("tree-rendered");
    svg.dataset.rendered = String(Math.round(performance.now() - routeStarted));
    if (pair) mark("tree-centred");
  });
  listPairs().catch((err) => mount(pairList, h("li", { class: "error" }, String(err.message || err))));
  const stop = ["completed", "failed"].includes(tree.status) ? null : follow(TREE_EVENTS, applyLive, { after: tree.position });
  return () => {
    if (stop) stop();
    clearTimeout(pending);
    window.removeEventListener("pointermove", onMove);
    window.removeEventListener("pointerup", onUp);
    window.removeEventListener("resize", onResize);
  };
}
