# Credentials: a credentials file others may read, of another user,
# missing, without the profile, or none at all, stops ckptd at start with a
# clear message, and `ckptd -n` (ExecStartPre) says the same; wrong ones (a bad secret, an unknown
# key id from the environment) leave local saves alone and put the server's
# reason in the log and in `ckptctl status`, never the secret; once they are
# fixed, the newest step catches up at the next start.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
SECRET=$(awk '/aws_secret_access_key/ {print $3}' "$S3_CREDS")
KEYID=$(awk '/aws_access_key_id/ {print $3}' "$S3_CREDS")
GOOD=$T/good-credentials
cp -p "$S3_CREDS" "$GOOD"

refused() {   # expected-message [remote keys]: ckptd -n and the start refuse, saying it
	write_conf "$(remote_conf "${@:2}")"
	out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n calls it valid: $out"
	echo "$out" | grep -q -- "$1" || fail "ckptd -n does not say '$1': $out"
	grep -q -- "$SECRET" <<< "$out" && fail "ckptd -n shows the secret"
	out=$(timeout 20 "$TOP/ckptd" -c "$CONF" 2>&1) && fail "ckptd started: $out"
	echo "$out" | grep -q -- "$1" || fail "ckptd's message does not say '$1': $out"
	[ -S "$SOCK" ] && fail "a socket was left"
	return 0
}
write_conf "$(remote_conf)"
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) || fail "ckptd -n refuses good credentials: $out"
grep -q -- "$SECRET" <<< "$out" && fail "ckptd -n shows the secret"
chmod 0644 "$S3_CREDS"
refused "group and others cannot read (chmod 600)"
chmod 0600 "$S3_CREDS"
if id nobody > /dev/null 2>&1; then
	chown nobody "$S3_CREDS"
	refused "must be a regular file of ckptd's user (or root)"
	chown root "$S3_CREDS"
fi
refused "has no aws_access_key_id and aws_secret_access_key under \[prod\]" '"profile": "prod"'
S3_CREDS_SAVED=$S3_CREDS
S3_CREDS=$T/no-such-file
refused "cannot open the credentials file '$T/no-such-file'"
S3_CREDS=$S3_CREDS_SAVED
S3_CREDS_SAVED=$S3_CREDS
S3_CREDS=""
refused "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
S3_CREDS=$S3_CREDS_SAVED

# a wrong secret: saves go on, the reason is shown
sed -i "s|$SECRET|wrong-$SECRET|" "$S3_CREDS"
start_ckptd "$(remote_conf '"retries": 1')"
trainer save -j A --mib 1 --steps 1:2 -q || fail "local saves with wrong credentials"
[ "$(latest_of A)" = iter_000000002 ] || fail "local latest: $(latest_of A)"
verify_latest A
wait_until 30 grep -q "SignatureDoesNotMatch" "$LOG" || fail "no clear error in the log"
# (the status takes the error once the upload's retries are spent)
wait_until 30 eval 'ckptctl status > "$T/status.txt" &&
	grep -q "last error.*403 SignatureDoesNotMatch" "$T/status.txt"' ||
	fail "status does not say why: $(cat "$T/status.txt")"
ckptctl status --json > "$T/status.json"
for f in "$LOG" "$T/status.txt" "$T/status.json"; do
	grep -q -- "$SECRET" "$f" && fail "the secret is in $f"
done
[ -z "$(s3_steps A)" ] || fail "steps went up with a wrong secret"
stop_ckptd || fail "stop"

# an unknown key id from the environment
write_conf "$(remote_conf '"retries": 1')"
sed -i 's|, "credentials_file": "[^"]*"||' "$CONF"
AWS_ACCESS_KEY_ID=AKIAUNKNOWNUNKNOWN00 AWS_SECRET_ACCESS_KEY=$SECRET restart_ckptd_n
trainer save -j A --mib 1 --steps 3 -q || fail "local save 3"
wait_until 30 grep -q "InvalidAccessKeyId" "$LOG" || fail "no InvalidAccessKeyId in the log"
ckptctl status | grep -q "last error.*InvalidAccessKeyId" || fail "status: $(ckptctl status)"
stop_ckptd || fail "stop"

# fixed: the newest local step goes up at start
cp -p "$GOOD" "$S3_CREDS"
start_ckptd "$(remote_conf)"
wait_until 60 s3_steps_is A iter_000000003 || fail "steps after the fix: '$(s3_steps A)'"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
grep -q -- "$SECRET" "$LOG" && fail "the secret is in the log"
grep -q -- "$KEYID" "$LOG" && fail "the whole key id is in the log"
pass
