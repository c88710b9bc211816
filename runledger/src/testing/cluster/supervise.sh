# Runs a throwaway PostgreSQL cluster for as long as this script's standard input stays open,
# then stops the server and removes its directory. The process that started the script holds
# the other end of that pipe: however it ends (a return, `exit`, a crash, SIGKILL), the kernel
# closes the pipe, and nothing of the cluster outlives it.
#
# Arguments: the directory of initdb and postgres, the cluster's directory (it exists, is
# empty and belongs to the user running this script), the TCP port on 127.0.0.1.
bin=$1 dir=$2 port=$3

# Only the closing of standard input stops the cluster; a reader that went away does not stop
# the clean-up either.
trap '' HUP INT PIPE
cd "$dir" || exit 1

if ! "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 --no-locale \
    >"$dir/initdb.log" 2>&1; then
    echo "initdb failed:" >&2
    tail -n 20 "$dir/initdb.log" >&2
    rm -rf "$dir"
    exit 1
fi

# TLS with a self-signed certificate, as a packaged server has, when openssl is installed.
tls=off
if openssl req -new -x509 -nodes -days 7 -subj /CN=127.0.0.1 \
    -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/data/server.key" -out "$dir/data/server.crt" >/dev/null 2>&1 &&
    chmod 600 "$dir/data/server.key"; then
    tls=on
fi

exec 3<&0
"$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c ssl="$tls" \
    </dev/null >"$dir/server.log" 2>&1 3<&- &
server=$!
# Stops the server (immediate shutdown, as `pg_ctl stop -m immediate`) once the pipe closes.
(
    cat <&3 >/dev/null 2>&1
    : >"$dir/stopping"
    kill -QUIT "$server"
) >/dev/null 2>&1 &
exec 3<&-

wait "$server"
if [ ! -e "$dir/stopping" ]; then
    echo "postgres stopped by itself:" >&2
    tail -n 20 "$dir/server.log" >&2
fi
rm -rf "$dir"
