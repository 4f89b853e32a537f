-- The results store lives beside Airflow's metadata, in its own database.
CREATE DATABASE roadgate OWNER airflow;
