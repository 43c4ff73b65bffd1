# Reliability campaign 'crash', short mode (tests/reliability/crash.sh; the long
# mode: tests/reliability/run --long crash).
exec bash "$(dirname "$0")/../reliability/crash.sh"
