# Errors of the object-store tier say what failed: a listing the endpoint
# does not answer names the bucket and the listing (not an empty key), and
# a tensor group named like ckptd's manifest is refused when registered,
# before any save, leaving nothing behind.
. "$(dirname "$0")/lib.sh"
printf '[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = abc\n' > "$T/creds"
chmod 600 "$T/creds"
start_ckptd '"remote": {"url": "s3://ckpt-test/p", "endpoint": "http://127.0.0.1:1", "credentials_file": "'"$T/creds"'", "retries": 0, "request_timeout_ms": 1000}'
out=$(ckptctl list --remote --job A 2>&1) && fail "list --remote with no endpoint: $out"
echo "$out" | grep -q "GET ckpt-test?list-type=2&prefix=p%2FA%2F: " || fail "list error: $out"

out=$(trainer save -j A --mib 1 --steps 1 --groups checkpoint_manifest.json -q 2>&1) &&
	fail "a group named checkpoint_manifest.json was saved: $out"
echo "$out" | grep -q "bad group name: \"checkpoint_manifest.json\" is ckptd's manifest" ||
	fail "group refusal: $out"
assert_no_leftovers
ls "$ROOT/A" 2>/dev/null | grep -q iter_ && fail "a step was published: $(ls "$ROOT/A")"
pass
