#!/usr/bin/env bash
# Make sure the servers the test suite talks to answer on loopback, starting (and, for the
# optional ones, installing with apt) what is missing. Fails loudly, naming the server.
#   PostgreSQL 127.0.0.1:5432 and Redis 127.0.0.1:6379: the suite's database and broker
#   RabbitMQ 127.0.0.1:5672: the portable-broker dispatch test
#   Debian's chromium: the admin pages' browser tests
#   Debian's faketime (libfaketime): the fault campaign's skewed worker clocks
#   with MARIADB=1, MariaDB 127.0.0.1:3306 (root, no password) and the client headers that
#   mysqlclient builds against: the specification's MariaDB pass (make test-mariadb)
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() { for _ in $(seq 1 "$2"); do port_open "$1" && return 0; sleep 1; done; return 1; }
apt_install() {
  if [ "$(id -u)" != 0 ]; then echo "FATAL: $* is missing; install it (apt-get install $*)"; exit 1; fi
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -q >/dev/null; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

if ! port_open 5432; then
  echo "PostgreSQL is down; starting it"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  wait_port 5432 30 || true
fi
port_open 5432 || { echo "FATAL: PostgreSQL does not answer on 127.0.0.1:5432"; exit 1; }

if ! port_open 6379; then
  echo "Redis is down; starting it"
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  wait_port 6379 30 || true
fi
port_open 6379 || { echo "FATAL: Redis does not answer on 127.0.0.1:6379"; exit 1; }

if ! port_open 5672; then
  echo "RabbitMQ is down; starting it"
  command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
  rabbitmq-server -detached || true
  wait_port 5672 90 || true
fi
port_open 5672 || { echo "FATAL: RabbitMQ does not answer on 127.0.0.1:5672"; exit 1; }

if [ "${MARIADB:-0}" = 1 ]; then
  pkg-config --exists libmariadb 2>/dev/null || apt_install libmariadb-dev pkg-config
  if ! port_open 3306; then
    echo "MariaDB is down; starting it"
    command -v mariadbd >/dev/null || apt_install mariadb-server
    if [ -x /etc/init.d/mariadb ]; then
      /etc/init.d/mariadb start >/dev/null || true
    else
      mkdir -p /run/mysqld && chown mysql: /run/mysqld 2>/dev/null || true
      (mysqld_safe --bind-address=127.0.0.1 >/dev/null 2>&1 &)
    fi
    wait_port 3306 60 || true
  fi
  port_open 3306 || { echo "FATAL: MariaDB does not answer on 127.0.0.1:3306"; exit 1; }
  if ! mariadb -uroot -h127.0.0.1 -e 'SELECT 1' >/dev/null 2>&1; then
    # A fresh Debian install lets root in by its socket only: the suite connects over TCP.
    echo "letting root in from 127.0.0.1 without a password (a test server)"
    mariadb -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
      GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" ||
      { echo "FATAL: MariaDB refuses root from 127.0.0.1"; exit 1; }
  fi
fi

if ! command -v chromium >/dev/null; then
  echo "installing Debian's chromium for the admin browser tests"
  apt_install chromium
fi
command -v chromium >/dev/null || { echo "FATAL: chromium is not installed"; exit 1; }

if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] && ! command -v faketime >/dev/null; then
  echo "installing Debian's faketime for the fault campaign's clock skew"
  apt_install faketime
fi
