# Reliability campaign 'powerloss', short mode (tests/reliability/powerloss.sh;
# the long mode: tests/reliability/run --long powerloss).  Skips without loop devices.
exec bash "$(dirname "$0")/../reliability/powerloss.sh"
