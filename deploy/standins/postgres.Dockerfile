# Stand-in for postgres:16-alpine (test scaffolding of deploy/compose-check; see README.md here).
ARG ROOT_IMAGE=agentr-standin/bookworm:minbase
FROM ${ROOT_IMAGE}
ENV LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive \
    PGDATA=/var/lib/postgresql/data \
    PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Debian's package creates a cluster of its own: drop it; the entrypoint makes one in $PGDATA.
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && pg_dropcluster 15 main \
 && mkdir -p "$PGDATA" /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
 && chmod 700 "$PGDATA"
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER postgres
VOLUME ["/var/lib/postgresql/data"]
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
