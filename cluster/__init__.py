"""roadgate's Airflow 3 deployment on one machine (`make cluster`, `make cluster-down`): the
settings of docker/airflow.env, private PostgreSQL and Redis servers, and the Airflow services
with two Celery workers. See cluster.deployment."""
