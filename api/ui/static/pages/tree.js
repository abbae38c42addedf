// Owns the Tree canvas: one MCTS tree drawn as SVG (a node per API node, coloured by Q = value/N),
// terminal rewards on the leaves, good (reward >= the iteration's alpha) and bad leaves outlined,
// the tree's pairs drawn as highlighted paths from their divergence node; click a node for its
// history (thought, action, observation from the root), its candidates (children) and visits;
// zoom with the wheel or the buttons, pan by dragging.

import { all, get } from "../api.js";
import { fmt, h, link, s, shortId, valueColour, mount } from "../dom.js";

const DX = 26;
const DY = 64;
const R = 8;

function layout(nodes) {
  const children = new Map();
  const byId = new Map(nodes.map((n) => [n.node_id, n]));
  for (const n of nodes) children.set(n.node_id, []);
  let root = null;
  for (const n of nodes) {
    if (n.parent_id && children.has(n.parent_id)) children.get(n.parent_id).push(n);
    else if (!root || n.depth < root.depth) root = n;
  }
  for (const list of children.values()) list.sort((a, b) => (a.action < b.action ? -1 : a.action > b.action ? 1 : 0));
  const pos = new Map();
  let nextLeaf = 0;
  // iterative post-order walk: leaves take the next column, parents sit over their children
  const stack = root ? [[root, false]] : [];
  while (stack.length) {
    const [node, expanded] = stack.pop();
    const kids = children.get(node.node_id);
    if (!expanded && kids.length) {
      stack.push([node, true]);
      for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], false]);
      continue;
    }
    const x = kids.length ? (pos.get(kids[0].node_id).x + pos.get(kids[kids.length - 1].node_id).x) / 2 : nextLeaf++ * DX;
    pos.set(node.node_id, { x, y: node.depth * DY });
  }
  // nodes not reachable from the root (should not happen) still get drawn, in a row below
  for (const n of nodes) if (!pos.has(n.node_id)) pos.set(n.node_id, { x: nextLeaf++ * DX, y: (n.depth + 1) * DY });
  return { byId, children, pos, root, columns: Math.max(1, nextLeaf) };
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

export async function render(main, [treeId], query) {
  const tree = await get(`/v1/trees/${treeId}`);
  let alpha = 1.0;
  let pairs = [];
  if (tree.run_id) {
    const run = await get(`/v1/runs/${tree.run_id}`);
    const it = run.iterations.find((i) => i.iteration === tree.iteration);
    if (it) alpha = it.alpha;
    const listed = (await all(`/v1/runs/${tree.run_id}/pairs`, { iteration: tree.iteration })).filter((p) => p.tree_id === treeId);
    pairs = await Promise.all(listed.slice(0, 60).map((p) => get(`/v1/pairs/${p.pair_id}`)));
  }
  const { byId, children, pos, columns } = layout(tree.nodes);
  const maxDepth = Math.max(0, ...tree.nodes.map((n) => n.depth));
  const width = columns * DX + 2 * DX;
  const height = (maxDepth + 1) * DY + DY;
  const fit = { x: -DX, y: -DY / 2, w: width, h: height };
  const view = { ...fit };
  // a wide tree (hundreds of leaves) starts at full height around the root (or the linked node),
  // about as wide as the canvas is; "fit" shows all of it
  const focus = pos.get(query.get("node")) || (tree.root_id && pos.get(tree.root_id));
  if (width > height * 1.6 && focus) {
    view.w = height * 1.6;
    view.x = Math.min(Math.max(focus.x - view.w / 2, fit.x), fit.x + fit.w - view.w);
  }

  const edges = s("g", { class: "edges" });
  const highlight = s("g", { class: "highlight" });
  const nodeLayer = s("g", { class: "nodes" });
  const labels = s("g", { class: "labels" });
  const svg = s("svg", { id: "tree-canvas", class: "canvas", role: "img", "aria-label": `tree ${treeId}` }, edges, highlight, nodeLayer, labels);
  const panel = h("aside", { id: "node-panel", class: "panel" }, h("p", { class: "muted" }, "Click a node to see its history."));

  function setView() {
    svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  }

  for (const n of tree.nodes) {
    if (!n.parent_id || !pos.has(n.parent_id)) continue;
    const a = pos.get(n.parent_id), b = pos.get(n.node_id);
    edges.append(s("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: "edge", dataset: { child: n.node_id } }));
  }
  for (const n of tree.nodes) {
    const p = pos.get(n.node_id);
    const isLeaf = children.get(n.node_id).length === 0 && (n.visits > 0 || n.done);
    const reward = n.visits ? n.value_sum / n.visits : n.reward;
    const kind = isLeaf ? (reward >= alpha ? "good" : "bad") : "";
    const circle = s("circle", {
      cx: p.x, cy: p.y, r: R,
      class: `node${isLeaf ? ` leaf ${kind}` : ""}${n.valid ? "" : " invalid"}`,
      fill: valueColour(n.q),
      dataset: { nodeId: n.node_id, visits: String(n.visits), q: n.q === null ? "" : String(n.q) },
    }, s("title", {}, `${n.action || "(root)"}\nN=${n.visits} Q=${fmt(n.q)}`));
    circle.addEventListener("click", (event) => {
      event.stopPropagation();
      select(n.node_id);
    });
    nodeLayer.append(circle);
    if (isLeaf) labels.append(s("text", { x: p.x, y: p.y + R + 12, class: `reward ${kind}`, "text-anchor": "middle" }, fmt(reward, 2)));
  }

  function select(nodeId) {
    for (const el of nodeLayer.querySelectorAll("circle.selected")) el.classList.remove("selected");
    const el = nodeLayer.querySelector(`circle[data-node-id="${CSS.escape(nodeId)}"]`);
    if (el) el.classList.add("selected");
    const node = byId.get(nodeId);
    const history = pathTo(byId, nodeId);
    const kids = children.get(nodeId);
    mount(panel,
      h("h3", {}, `Node ${shortId(nodeId)}`),
      h("p", { id: "node-stats" }, `depth ${node.depth} · N=${node.visits} · Q=${fmt(node.q)} · reward ${fmt(node.reward)} · ${node.done ? "done" : "open"}${node.valid ? "" : " · invalid action"}`),
      h("h4", {}, "History"),
      h("ol", { class: "history", start: 0 }, history.map((step) => h("li", {},
        step.depth === 0 ? h("div", { class: "observation" }, step.observation) : [
          step.thought ? h("div", { class: "thought" }, `Thought: ${step.thought}`) : null,
          h("div", { class: "action" }, `Action: ${step.action}`),
          h("div", { class: "observation" }, step.observation),
        ]))),
      h("h4", {}, `Candidates (${kids.length})`),
      kids.length ? h("ul", { class: "candidates" }, kids.map((k) => h("li", {},
        h("a", { href: "#", onclick: (e) => { e.preventDefault(); select(k.node_id); } }, k.action || "(empty)"),
        ` · N=${k.visits} · Q=${fmt(k.q)}${k.done ? " · terminal" : ""}`))) : h("p", { class: "muted" }, "none (leaf)"),
    );
  }

  function showPair(detail) {
    highlight.replaceChildren();
    for (const el of nodeLayer.querySelectorAll("circle.on-pair")) el.classList.remove("on-pair");
    if (!detail) return;
    const draw = (leafId, cls) => {
      if (!leafId || !byId.has(leafId)) return;
      const path = pathTo(byId, leafId);
      for (let i = 1; i < path.length; i++) {
        if (path[i].depth <= detail.shared_steps) continue;
        const a = pos.get(path[i - 1].node_id), b = pos.get(path[i].node_id);
        highlight.append(s("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: `pair-path ${cls}` }));
      }
    };
    draw(detail.bad_leaf_id, "bad");
    draw(detail.good_leaf_id, "good");
    const d = detail.divergence_node_id && pos.get(detail.divergence_node_id);
    if (d) highlight.append(s("circle", { cx: d.x, cy: d.y, r: R + 5, class: "divergence", dataset: { nodeId: detail.divergence_node_id } }));
  }

  // zoom (wheel, buttons) and pan (drag)
  function zoom(factor, cx = view.x + view.w / 2, cy = view.y + view.h / 2) {
    view.x = cx - (cx - view.x) * factor;
    view.y = cy - (cy - view.y) * factor;
    view.w *= factor;
    view.h *= factor;
    setView();
  }
  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    const rect = svg.getBoundingClientRect();
    const cx = view.x + ((event.clientX - rect.left) / rect.width) * view.w;
    const cy = view.y + ((event.clientY - rect.top) / rect.height) * view.h;
    zoom(event.deltaY > 0 ? 1.15 : 1 / 1.15, cx, cy);
  }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, vx: view.x, vy: view.y };
  });
  window.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const rect = svg.getBoundingClientRect();
    view.x = drag.vx - ((event.clientX - drag.x) / rect.width) * view.w;
    view.y = drag.vy - ((event.clientY - drag.y) / rect.height) * view.h;
    setView();
  });
  window.addEventListener("pointerup", () => { drag = null; });
  setView();

  const pairList = h("ul", { id: "tree-pairs", class: "pairs" }, pairs.map((p) => h("li", {},
    h("a", { href: `#/trees/${treeId}?pair=${p.pair_id}`, dataset: { pairId: p.pair_id } }, `pair ${shortId(p.pair_id)}`),
    ` · diverges at step ${p.shared_steps} · t'=${fmt(p.transition_index)} · `,
    link(`#/pairs/${p.pair_id}`, "diff"))));

  mount(main,
    h("h1", {}, "Tree ", h("code", {}, treeId)),
    h("p", { class: "muted" },
      tree.run_id ? link(`#/runs/${tree.run_id}`, `run ${shortId(tree.run_id)}`) : "no run",
      ` · iteration ${tree.iteration} · task ${tree.task_id} · ${tree.status} · `,
      h("span", { id: "node-count" }, `${tree.nodes.length} nodes`),
      ` · best reward ${fmt(tree.best_reward)} · alpha ${alpha}`),
    h("div", { class: "toolbar" },
      h("button", { type: "button", id: "zoom-in", onclick: () => zoom(1 / 1.3) }, "+"),
      h("button", { type: "button", id: "zoom-out", onclick: () => zoom(1.3) }, "−"),
      h("button", { type: "button", id: "zoom-fit", onclick: () => { Object.assign(view, fit); setView(); } }, "fit"),
      h("span", { class: "legend" },
        h("span", { class: "swatch", style: `background:${valueColour(0)}` }), " Q=0 ",
        h("span", { class: "swatch", style: `background:${valueColour(0.5)}` }), " 0.5 ",
        h("span", { class: "swatch", style: `background:${valueColour(1)}` }), " 1 ",
        h("span", { class: "swatch unvisited" }), " unvisited · ",
        h("span", { class: "ring good" }), " good leaf ",
        h("span", { class: "ring bad" }), " bad leaf ",
        h("span", { class: "ring divergence" }), " divergence · dotted outline: invalid action")),
    h("div", { class: "tree-layout" }, h("div", { class: "canvas-wrap" }, svg), panel),
    h("h2", {}, `Pairs in this tree (${pairs.length})`),
    pairs.length ? pairList : h("p", { class: "muted" }, "No pairs."),
  );
  const wanted = query.get("pair");
  showPair(pairs.find((p) => p.pair_id === wanted) || null);
  const node = query.get("node");
  if (node && byId.has(node)) select(node);
}
