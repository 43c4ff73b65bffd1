# Reliability campaign 'faults', short mode (tests/reliability/faults.sh; the long
# mode: tests/reliability/run --long faults).
exec bash "$(dirname "$0")/../reliability/faults.sh"
