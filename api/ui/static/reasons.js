// Owns how the UI shows why a message carries its loss weight (`why`, core.domain.weight_reasons):
// a tag beside "weight 0/1" on every page that lists a sample's messages, and the reason in a
// token's tooltip. The vocabulary and its meanings come from the API (GET /v1/samples/{id}:
// weight_reasons); without them the reason's own name is shown.

import { h } from "./dom.js";

/** "bad_step" -> "bad step"; "" (samples stored before reasons existed) -> "reason not recorded". */
export function reasonLabel(why) {
  return why ? why.replaceAll("_", " ") : "reason not recorded";
}

/** The tag for a message's reason, its meaning (when `meanings` has it) as the tooltip. */
export function whyTag(why, meanings) {
  const reason = why || "";
  const meaning = (meanings || {})[reason];
  return h("span", { class: `tag why${reason ? ` why-${reason}` : " unrecorded"}`, title: meaning || null, dataset: { why: reason } },
    reasonLabel(reason));
}
