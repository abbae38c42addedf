# Stand-in for redis:7-alpine (test scaffolding of deploy/compose-check; see README.md here).
ARG ROOT_IMAGE=agentr-standin/bookworm:minbase
FROM ${ROOT_IMAGE}
ENV LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER redis
WORKDIR /data
VOLUME ["/data"]
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
