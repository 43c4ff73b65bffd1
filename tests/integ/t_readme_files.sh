# Every source file is named in README.md's architecture table (issue 24:
# gpu_sess.c and remote_none.c were not), by path or by the short name
# that follows its directory's first entry in a row, or by a glob there.
. "$(dirname "$0")/lib.sh"
table=$(sed -n '/^| `proto\/`/,/^$/p' "$TOP/README.md")
[ -n "$table" ] || fail "README.md has no architecture table (a row starting | \`proto/\`)"
missing=""
for f in "$TOP"/daemon/*.c "$TOP"/client/*.c "$TOP"/proto/*.c "$TOP"/shm/*.c; do
	dir=$(basename "$(dirname "$f")"); b=$(basename "$f")
	named=0
	# a row naming the directory (`dir/` or `dir/x.c`) names b, a glob of it, or the directory alone
	while IFS= read -r row; do
		case "$row" in *"\`$dir/"*) ;; *) continue ;; esac
		case "$row" in *"\`$dir/\`"*|*"\`$b\`"*|*"\`$dir/$b\`"*) named=1 ;; esac
		for g in $(echo "$row" | grep -oE '`[a-z_/]*\*[a-z_.]*`' | tr -d '`'); do
			case "$b" in ${g##*/}) named=1 ;; esac
		done
	done <<< "$table"
	[ $named = 1 ] || missing="$missing $dir/$b"
done
[ -z "$missing" ] || fail "README.md's architecture table does not name:$missing"
pass
