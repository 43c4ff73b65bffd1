# Reliability campaign 'soak', short mode (tests/reliability/soak.sh; the long
# mode: tests/reliability/run --long soak).
exec bash "$(dirname "$0")/../reliability/soak.sh"
