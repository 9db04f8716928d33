#!/usr/bin/env bash
# A trlx reward program in shell (bash and POSIX awk; no jq, no Python): a
# length penalty,
#
#   reward = -(number of completion tokens) / 100
#
# written with two decimals (37 tokens -> -0.37; none -> 0). It reads one JSON
# request per line on stdin and answers {"rewards": [...]} on stdout
# (docs/reward_programs.md).
#
# Shell tools cannot parse JSON in general; this program needs only
# "completion_ids":[[...],[...]], a list of lists of integers. Inside a JSON
# string every quote is escaped, so the text "completion_ids": (with its
# quotes) appears in a request only as that key.
#
# Use it in a trainer config:
#
#   reward_funcs:
#     - command: bash examples/rewards/length_reward.sh
set -u

# One awk per request rather than one awk over the whole stream: awk may hold
# back input and output in buffers, and trlx waits for each answer before it
# sends the next request. awk's output is flushed when it exits.
while IFS= read -r line; do
  printf '%s\n' "$line" | awk '
    {
      ids = $0
      if (!sub(/.*"completion_ids":\[\[/, "", ids)) {
        print "length_reward.sh: a request without completion_ids" > "/dev/stderr"
        exit 1
      }
      sub(/\]\].*/, "", ids)          # ids: 1,2],[],[3 for [[1,2],[],[3]]
      # split() finds no field in "", the text of [[]]: one empty completion.
      count = (ids == "") ? 1 : split(ids, lists, /\],\[/)
      out = ""
      for (i = 1; i <= count; i++) {
        n = (lists[i] == "") ? 0 : split(lists[i], unused, ",")
        out = out (i > 1 ? "," : "") (n ? sprintf("-%.2f", n / 100) : "0")
      }
      print "{\"rewards\":[" out "]}"
    }' || exit 1
done
