# campaign-sender image: both binaries (campaign-sender, fake-provider) on a minimal non-root
# runtime. Not built in this repository's CI (no container engine there); keep it simple enough
# to review:
#   docker build -t campaign-sender:0.1.0 .
#
# Stage 1: dependencies only, so a source change does not rebuild them.
# The toolchain the project is built and tested with (Cargo.lock needs it).
FROM rust:1.95-slim-bookworm AS deps
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# Stub targets with the manifest's paths, to build and cache the dependency graph.
RUN mkdir -p src/bin loadtest benches tests/it \
 && echo 'fn main() {}' > src/main.rs \
 && echo 'fn main() {}' > src/bin/fake-provider.rs \
 && echo 'fn main() {}' > loadtest/drain.rs \
 && echo 'fn main() {}' > benches/engine.rs \
 && echo '' > tests/it/main.rs \
 && echo '' > src/lib.rs \
 && cargo build --locked --release --bin campaign-sender --bin fake-provider \
 && rm -rf src loadtest benches tests

# Stage 2: the real build (sqlx's migrations are embedded at compile time from migrations/).
FROM deps AS build
COPY src src
COPY migrations migrations
COPY loadtest loadtest
COPY benches benches
COPY tests tests
RUN touch src/main.rs src/lib.rs \
 && cargo build --locked --release --bin campaign-sender --bin fake-provider

# Stage 3: runtime. distroless/cc has glibc and CA roots (rustls uses its bundled webpki roots
# anyway), no shell, no package manager; "nonroot" is uid 65532 — the manifests run as 10001,
# which needs no passwd entry.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/campaign-sender /usr/local/bin/campaign-sender
COPY --from=build /src/target/release/fake-provider /usr/local/bin/fake-provider
USER 10001:10001
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/campaign-sender"]
CMD ["run"]
